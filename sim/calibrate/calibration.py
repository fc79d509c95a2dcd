"""Calibration files: written by ``llmsim calibrate``, applied by ``llmsim run --calibration FILE``.

A calibration file is YAML::

    llmsim_calibration: 1
    topology: dgx-a100            # the topology it was calibrated on (the default for --calibration)
    scale_up:
      bandwidth_GBps: 300         # what the efficiencies are fractions of (checked, not set)
      collective_latency_us: {value: 30.45, source: "a100.log: ..."}
      efficiency_by_size_bytes: {value: [[1048576, 0.4452], ...], source: "a100.log: ..."}
      alltoall_efficiency_by_size_bytes: {...}   # nvls_, alltoall_, p2p_, all_gather_, reduce_scatter_...
    scale_out:
      nics_per_node: 8            # the NICs the efficiencies are fractions of (checked, not set)
      nic_bandwidth_Gbps: 400
      latency_us: {value: 27.54, source: "2node.log: ..."}
      efficiency_by_size_bytes: {value: [[1048576, 0.0357], ...], source: "2node.log: ..."}
      alltoall_efficiency_by_size_bytes: {...}   # alltoall_, all_gather_, reduce_scatter_ (between nodes)
    logs: [...]                   # what was read: which log calibrated what, which are checks, which not used and why
    check: [...]                  # each log's bus bandwidth and the topology's before and after, size by size
    factors:                      # llmsim calibrate --runs (sim.costs.factors)
      compute_efficiency: {value: 0.87, source: "least squares over 3 runs (runs.yaml: ...): ..."}
    runs: [...]                   # each measured run, its prediction before and after the fit
    kernels:                      # llmsim calibrate --kernels (sim.calibrate.kernel_section)
      gpu: H100-SXM5-80GB
      curves: {gemm_bf16: {value: [[1073741824.0, 0.288], ...], source: "kernels.csv: ..."}, ...}
      check: [...]                # each measured kernel's time, the catalogue's and the calibrated GPU's

``scale_up`` and ``scale_out`` (with ``topology`` and ``logs``, ``check``) come from
``--nccl-tests``, ``factors`` (with ``runs``) from ``--runs``, ``kernels`` from ``--kernels``; a
file has one or more. Applying it loads the topology (the one named on the command line, else
the file's) with the file's ``scale_up`` and ``scale_out`` values in place of the topology's
(:func:`calibrated_topology`): the topology's scale-up bandwidth, and its NICs per node and
their bandwidth, must be the file's, since the curves are fractions of them; its ``factors``
and ``kernels`` curves go to :func:`sim.runner.simulate` (:func:`apply_calibration`), which
puts the curves in place of the workload's GPU's where that is the GPU they were measured on
(:meth:`sim.costs.factors.KernelCurves.on`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from sim.calibrate.kernel_section import KernelSection, parse_kernel_section
from sim.calibrate.scale_up import CalibratedValue
from sim.config import load_topology
from sim.config.fields import is_finite, is_int, is_str, read_yaml
from sim.config.topology import MAX_BANDWIDTH, MAX_LATENCY_US, MAX_MESSAGE_BYTES
from sim.costs.factors import FACTOR_NAMES, CalibrationFactors
from sim.errors import ConfigError, Described
from sim.topology.spec import FabricKind, TopologySpec
from sim.units import GBIT_PER_S, GBPS

__all__ = ["CHECK_KEYS", "FORMAT", "FACTOR_BOUNDS", "LOG_KEYS", "RUN_KEYS", "Calibration", "apply_calibration",
           "calibrated_topology", "load_calibration", "topology_option"]

FORMAT = 1
"""The calibration file format (``llmsim_calibration: 1``)."""
_TOP_KEYS = ("llmsim_calibration", "topology", "scale_up", "scale_out", "logs", "check", "factors", "runs",
             "kernels")
FACTOR_BOUNDS = {"compute_efficiency": (0.01, 100.0), "comm_efficiency": (0.01, 100.0), "host_issue_us": (0.0, 1e4)}
"""What a file's factor may be (wider than the fit's bounds, :mod:`sim.calibrate.runs`: a file
may be written by hand)."""
_CURVES = ("efficiency_by_size_bytes", "nvls_efficiency_by_size_bytes", "alltoall_efficiency_by_size_bytes",
           "p2p_efficiency_by_size_bytes", "all_gather_efficiency_by_size_bytes",
           "reduce_scatter_efficiency_by_size_bytes")
_UP_KEYS = ("bandwidth_GBps", "collective_latency_us") + _CURVES
_OUT_KEYS = ("nics_per_node", "nic_bandwidth_Gbps", "latency_us", "efficiency_by_size_bytes",
             "alltoall_efficiency_by_size_bytes", "all_gather_efficiency_by_size_bytes",
             "reduce_scatter_efficiency_by_size_bytes")
RUN_KEYS = ("file", "id", "metric", "measured", "predicted_before", "predicted_after", "error_before", "error_after",
            "predicted_written", "predicted_left_out")
"""The keys of a row of a file's ``runs`` (:mod:`sim.calibrate.command` writes them all; the
first four are needed, ``predicted_left_out`` may be null)."""
_RUN_NEEDED = RUN_KEYS[:4]
LOG_KEYS = ("file", "collective", "ranks", "nodes", "devices", "nccl_version", "rows", "used", "role",
            "not_used_because")
"""The keys of an entry of a file's ``logs`` (``role`` where the log is used, ``not_used_because``
where it is not)."""
CHECK_KEYS = ("log", "collective", "role", "size_bytes", "log_busbw_GBps", "topology_busbw_GBps",
              "calibrated_busbw_GBps", "error_before", "error")
"""The keys of a row of a file's ``check``, every one needed."""


@dataclass(frozen=True)
class Calibration:
    """A calibration: the topology it was made on, its scale-up bandwidth, the values it sets,
    and what it read (``logs``) and how well the result reproduces it (``check``); the factors
    fitted to measured runs, and those runs (``runs``); the GPU's curves measured from its
    kernels (``kernels``). ``values`` are the ``scale_up`` values (of ``bandwidth_GBps``),
    ``scale_out`` the ``scale_out`` values (of ``nics_per_node`` NICs of ``nic_bandwidth_Gbps``);
    without nccl-tests logs, ``topology`` is None and both are empty."""

    path: str
    topology: str | None
    bandwidth_GBps: float | None
    values: tuple[CalibratedValue, ...]
    logs: tuple[dict, ...] = ()
    check: tuple[dict, ...] = ()
    factors: tuple[CalibratedValue, ...] = ()
    runs: tuple[dict, ...] = ()
    kernels: KernelSection | None = None
    scale_out: tuple[CalibratedValue, ...] = ()
    nics_per_node: int | None = None
    nic_bandwidth_Gbps: float | None = None

    @property
    def sets_topology(self) -> bool:
        """Whether the file sets topology values (``scale_up`` or ``scale_out``)."""
        return bool(self.values or self.scale_out)

    def to_dict(self) -> dict:
        out: dict = {"llmsim_calibration": FORMAT}
        if self.sets_topology:
            out["topology"] = self.topology
            if self.values:
                out["scale_up"] = {"bandwidth_GBps": self.bandwidth_GBps,
                                   **{v.key: {"value": v.value, "source": v.source} for v in self.values}}
            if self.scale_out:
                out["scale_out"] = {"nics_per_node": self.nics_per_node, "nic_bandwidth_Gbps": self.nic_bandwidth_Gbps,
                                    **{v.key: {"value": v.value, "source": v.source} for v in self.scale_out}}
            out.update({"logs": list(self.logs), "check": list(self.check)})
        if self.factors:
            out["factors"] = {v.key: {"value": v.value, "source": v.source} for v in self.factors}
            out["runs"] = list(self.runs)
        if self.kernels is not None:
            out["kernels"] = self.kernels.to_dict()
        return out

    def calibration_factors(self) -> CalibrationFactors | None:
        """The file's factors and kernel curves for :func:`sim.runner.simulate`; None when it has neither."""
        if not self.factors and self.kernels is None:
            return None
        kernels = self.kernels.curves(self.path) if self.kernels is not None else None
        return CalibrationFactors.of({v.key: float(v.value) for v in self.factors}, kernels)  # type: ignore[arg-type]

    def write(self, path: str | Path) -> None:
        """Write the file (YAML, a header comment saying what it is and how it is applied)."""
        head = ("# llmsim calibration, written by `llmsim calibrate`; `llmsim run --calibration FILE` applies its\n"
                "# scale_up and scale_out values to the topology, its factors to the cost model and its kernel curves\n"
                "# to the GPU they were measured on (each value says where it came from).\n")
        text = yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None, width=110,
                              allow_unicode=True)
        Path(path).parent.mkdir(parents=True, exist_ok=True)  # as the other writers make a missing folder
        Path(path).write_text(head + text, encoding="utf-8")

    def overrides(self) -> list[str]:
        """The values as ``scale_up.KEY=VALUE`` and ``scale_out.KEY=VALUE`` topology overrides
        (:func:`sim.config.load_topology`)."""
        out = []
        for section, values in (("scale_up", self.values), ("scale_out", self.scale_out)):
            out += [f"{section}.{v.key}={json.dumps(v.value)}" for v in values]
            if any(v.key == "efficiency_by_size_bytes" for v in values):
                out.append(f"{section}.efficiency=null")  # the curve replaces a constant efficiency
        return out


def load_calibration(path: str) -> Calibration:
    """Read a calibration file.

    Parameters
    ----------
    path : str
        The calibration file (YAML, the module docstring).

    Returns
    -------
    Calibration
        What the file holds, every section checked.

    Raises
    ------
    ConfigError
        Naming the file and the field for anything malformed: an unknown key at any level, a
        value of the wrong type (a boolean is not a number), a number that is not finite or out
        of range, a ``runs``, ``logs`` or ``check`` row missing a key, or a section read
        without the one it belongs to (``runs`` without ``factors``; ``topology``, ``logs`` or
        ``check`` without ``scale_up`` or ``scale_out``).
    """
    raw = read_yaml(Path(path))
    version = raw.get("llmsim_calibration") if isinstance(raw, dict) else None
    if not isinstance(raw, dict) or not isinstance(version, int) or isinstance(version, bool) or version != FORMAT:
        raise ConfigError(path, "llmsim_calibration", f"a calibration file written by llmsim calibrate "
                          f"(llmsim_calibration: {FORMAT})", version if isinstance(raw, dict)
                          else Described(f"a {type(raw).__name__}"))
    for key in raw:
        if key not in _TOP_KEYS:
            raise ConfigError(path, str(key), f"one of {list(_TOP_KEYS)}", key)
    factors = _factors(path, raw.get("factors")) if "factors" in raw else ()
    runs = _runs(path, raw.get("runs", []))
    if runs and not factors:
        raise ConfigError(path, "runs", "the factors fitted to them beside them (factors: {compute_efficiency: "
                          "...}): a file's runs are those of its fit", Described(f"{len(runs)} runs and no factors"))
    logs = _rows(path, "logs", raw.get("logs", []), LOG_KEYS, _check_log)
    check = _rows(path, "check", raw.get("check", []), CHECK_KEYS, _check_check)
    kernels = parse_kernel_section(path, raw["kernels"]) if "kernels" in raw else None
    if "scale_up" not in raw and "scale_out" not in raw and (factors or kernels is not None):
        for key in ("topology", "logs", "check"):
            if key in raw:
                raise ConfigError(path, key, "scale_up or scale_out values beside it (llmsim calibrate --nccl-tests "
                                  "writes them together; a file of factors or kernel curves applies to the topology "
                                  "the command names)", raw[key])
        return Calibration(path, None, None, (), factors=factors, runs=runs, kernels=kernels)
    topology = raw.get("topology")
    if not isinstance(topology, str) or not topology:
        raise ConfigError(path, "topology", "the topology preset or file it was calibrated on", topology)
    out, nics, nic_bw = _scale_out(path, raw["scale_out"]) if "scale_out" in raw else ((), None, None)

    def made(bw: float | None, values: tuple[CalibratedValue, ...]) -> Calibration:
        return Calibration(path, topology, bw, values, logs, check, factors=factors, runs=runs,
                           kernels=kernels, scale_out=out, nics_per_node=nics, nic_bandwidth_Gbps=nic_bw)

    if out and "scale_up" not in raw:
        return made(None, ())
    up = raw.get("scale_up")
    if not isinstance(up, dict):
        raise ConfigError(path, "scale_up", f"a mapping of {list(_UP_KEYS)} (or a file of factors: factors: "
                          f"{{{', '.join(FACTOR_NAMES)}}}, or of kernel curves: kernels: {{gpu, curves, ...}})", up)
    for key in up:
        if key not in _UP_KEYS:
            raise ConfigError(path, f"scale_up.{key}", f"one of {list(_UP_KEYS)}", key)
    bw = up.get("bandwidth_GBps")
    if isinstance(bw, bool) or not isinstance(bw, (int, float)) or not 0 < bw < float("inf"):
        raise ConfigError(path, "scale_up.bandwidth_GBps", "a positive bandwidth (GB/s)", bw)
    return made(float(bw), _calibrated_values(path, "scale_up", up, _UP_KEYS[1:], "collective_latency_us"))


def _is_count(x: object) -> bool:
    """Whether ``x`` is a positive integer (not a boolean)."""
    return is_int(x) and x >= 1


def _is_text(x: object) -> bool:
    """Whether ``x`` is a non-empty string."""
    return is_str(x) and bool(x)


def _rows(path: str, section: str, listed: object, keys: tuple[str, ...],
          check: Callable[[str, str, dict], None]) -> tuple[dict, ...]:
    """The list ``section`` of mappings, each of some of ``keys`` and checked by ``check(path,
    field, row)``; a ConfigError naming the file, the row and the key otherwise."""
    if not isinstance(listed, list):
        raise ConfigError(path, section, "a list of mappings (what llmsim calibrate read, and how well the result "
                          "reproduces it)", listed)
    for i, row in enumerate(listed):
        field = f"{section}[{i}]"
        if not isinstance(row, dict):
            raise ConfigError(path, field, f"a mapping of {list(keys)}", row)
        for key in row:
            if key not in keys:
                raise ConfigError(path, f"{field}.{key}", f"one of {list(keys)}", key)
        check(path, field, row)
    return tuple(listed)


def _runs(path: str, listed: object) -> tuple[dict, ...]:
    """A file's ``runs``: each row of :data:`RUN_KEYS`, its figures positive (errors of at least
    -1: they are written to 4 decimals)."""
    if not isinstance(listed, list):
        raise ConfigError(path, "runs", "a list of the measured runs the factors were fitted to", listed)
    return _rows(path, "runs", listed, RUN_KEYS, _check_run)


def _check_run(path: str, field: str, row: dict) -> None:
    """One row of ``runs`` (:func:`_rows`)."""
    from sim.calibrate.runs import TIME_TARGETS

    for key in _RUN_NEEDED:
        if key not in row:
            raise ConfigError(path, f"{field}.{key}", f"the run's {key} (a row of runs has {list(_RUN_NEEDED)}, "
                              "and the predictions llmsim calibrate wrote)", Described("no such key"))
    for key in ("file", "id"):
        if not _is_text(row[key]):
            raise ConfigError(path, f"{field}.{key}", "a non-empty string", row[key])
    if row["metric"] not in TIME_TARGETS:
        raise ConfigError(path, f"{field}.metric", f"one of {list(TIME_TARGETS)}", row["metric"])
    for key in ("measured", "predicted_before", "predicted_after", "predicted_written", "predicted_left_out"):
        if key not in row or (key == "predicted_left_out" and row[key] is None):
            continue
        if not (is_finite(row[key]) and row[key] > 0):
            null = " (or null: the run alone determines a factor)" if key == "predicted_left_out" else ""
            raise ConfigError(path, f"{field}.{key}", f"a positive number, in the unit of the metric "
                              f"{row['metric']}{null}", row[key])
    for key in ("error_before", "error_after"):
        # written to 4 decimals: a prediction 20,000 times short of the measurement reads -1.0
        if key in row and not (is_finite(row[key]) and row[key] >= -1):
            raise ConfigError(path, f"{field}.{key}", "a relative error, predicted / measured - 1 (a number of at "
                              "least -1)", row[key])


def _check_log(path: str, field: str, row: dict) -> None:
    """One entry of ``logs`` (:func:`_rows`): the log read, and what it did or why not."""
    for key in ("file", "collective", "ranks", "nodes", "devices", "rows", "used"):
        if key not in row:
            raise ConfigError(path, f"{field}.{key}", f"the log's {key} (an entry of logs has "
                              f"{list(LOG_KEYS[:8])}, and its role or why it is not used)", Described("no such key"))
    for key in ("file", "collective"):
        if not _is_text(row[key]):
            raise ConfigError(path, f"{field}.{key}", "a non-empty string", row[key])
    for key in ("ranks", "nodes", "rows"):
        if not _is_count(row[key]):
            raise ConfigError(path, f"{field}.{key}", "a positive integer", row[key])
    if not (isinstance(row["devices"], list) and row["devices"] and all(_is_text(d) for d in row["devices"])):
        raise ConfigError(path, f"{field}.devices", "a list of the log's GPU names", row["devices"])
    if row.get("nccl_version") is not None and not _is_text(row["nccl_version"]):
        raise ConfigError(path, f"{field}.nccl_version", "the NCCL version the log names, or null",
                          row["nccl_version"])
    if not isinstance(row["used"], bool):
        raise ConfigError(path, f"{field}.used", "true or false", row["used"])
    need, other = ("role", "not_used_because") if row["used"] else ("not_used_because", "role")
    if not _is_text(row.get(need)) or other in row:
        raise ConfigError(path, f"{field}.{need}", f"with used: {str(row['used']).lower()}, the log's {need} (a "
                          f"string) and no {other}", row.get(need))


def _check_check(path: str, field: str, row: dict) -> None:
    """One row of ``check`` (:func:`_rows`): a log's bus bandwidth at a size, the topology's
    before and after."""
    for key in CHECK_KEYS:
        if key not in row:
            raise ConfigError(path, f"{field}.{key}", f"the row's {key} (a row of check has {list(CHECK_KEYS)})",
                              Described("no such key"))
    for key in ("log", "collective", "role"):
        if not _is_text(row[key]):
            raise ConfigError(path, f"{field}.{key}", "a non-empty string", row[key])
    if not _is_count(row["size_bytes"]):
        raise ConfigError(path, f"{field}.size_bytes", "a positive number of bytes", row["size_bytes"])
    for key in ("log_busbw_GBps", "topology_busbw_GBps", "calibrated_busbw_GBps"):
        if not (is_finite(row[key]) and row[key] > 0):
            raise ConfigError(path, f"{field}.{key}", "a positive bandwidth (GB/s)", row[key])
    for key in ("error_before", "error"):
        if not (is_finite(row[key]) and row[key] > -1):
            raise ConfigError(path, f"{field}.{key}", "a relative error (a number above -1)", row[key])


def _scale_out(path: str, out: object) -> tuple[tuple[CalibratedValue, ...], int | None, float | None]:
    """A file's ``scale_out`` section: its values, and the NICs per node and their bandwidth (Gb/s)."""
    if not isinstance(out, dict):
        raise ConfigError(path, "scale_out", f"a mapping of {list(_OUT_KEYS)}", out)
    for key in out:
        if key not in _OUT_KEYS:
            raise ConfigError(path, f"scale_out.{key}", f"one of {list(_OUT_KEYS)}", key)
    nics = out.get("nics_per_node")
    if isinstance(nics, bool) or not isinstance(nics, int) or nics < 1:
        raise ConfigError(path, "scale_out.nics_per_node", "a positive number of NICs per node", nics)
    bw = out.get("nic_bandwidth_Gbps")
    if isinstance(bw, bool) or not isinstance(bw, (int, float)) or not 0 < bw <= MAX_BANDWIDTH:
        raise ConfigError(path, "scale_out.nic_bandwidth_Gbps", f"a positive bandwidth (Gb/s) of at most "
                          f"{MAX_BANDWIDTH:g}", bw)
    return _calibrated_values(path, "scale_out", out, _OUT_KEYS[2:], "latency_us"), nics, float(bw)


def _calibrated_values(path: str, section: str, raw: dict, keys: tuple[str, ...],
                       latency_key: str) -> tuple[CalibratedValue, ...]:
    """The ``{value, source}`` entries of ``section`` among ``keys``: ``latency_key`` a latency
    (us), the others efficiency curves; at least one."""
    values = []
    for key in keys:
        if key not in raw:
            continue
        entry = raw[key]
        field = f"{section}.{key}"
        if not (isinstance(entry, dict) and set(entry) == {"value", "source"} and isinstance(entry["source"], str)):
            raise ConfigError(path, field, "{value: ..., source: 'where it came from'}", entry)
        value = entry["value"]
        if key == latency_key:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_LATENCY_US:
                raise ConfigError(path, f"{field}.value", f"a latency from 0 to {MAX_LATENCY_US:g} us", value)
        else:
            _check_curve(path, f"{field}.value", value)
        values.append(CalibratedValue(key, value, entry["source"]))
    if not values:
        raise ConfigError(path, section, f"at least one of {list(keys)}", sorted(raw))
    return tuple(values)


def _factors(path: str, raw: object) -> tuple[CalibratedValue, ...]:
    """A file's ``factors`` mapping, each ``{value, source}`` within :data:`FACTOR_BOUNDS`."""
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(path, "factors", f"a mapping of some of {list(FACTOR_NAMES)}", raw)
    out = []
    for key, entry in raw.items():
        if key not in FACTOR_NAMES:
            raise ConfigError(path, f"factors.{key}", f"one of {list(FACTOR_NAMES)}", key)
        if not (isinstance(entry, dict) and set(entry) == {"value", "source"} and isinstance(entry["source"], str)):
            raise ConfigError(path, f"factors.{key}", "{value: ..., source: 'where it came from'}", entry)
        value = entry["value"]
        lo, hi = FACTOR_BOUNDS[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi or (
                key != "host_issue_us" and value == lo):
            raise ConfigError(path, f"factors.{key}.value", f"a number from {lo:g} to {hi:g}", value)
        out.append(CalibratedValue(key, float(value), entry["source"]))
    return tuple(out)


def _check_curve(path: str, field: str, pairs: object) -> None:
    if not (isinstance(pairs, list) and pairs):
        raise ConfigError(path, field, "a list of [message bytes, efficiency] pairs", pairs)
    last = 0.0
    for i, pair in enumerate(pairs):
        ok = (isinstance(pair, list) and len(pair) == 2
              and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in pair))
        if not ok or not last < pair[0] <= MAX_MESSAGE_BYTES or not 0 < pair[1] <= 1:
            raise ConfigError(path, f"{field}[{i}]", "[message bytes, efficiency in (0, 1]], sizes increasing", pair)
        last = pair[0]


def calibrated_topology(path: str, topology: str | None, notes: list[str] | None = None,
                        cal: Calibration | None = None) -> TopologySpec:
    """The topology ``topology`` (None: the calibration's own) with calibration ``path`` applied
    (``cal``: the file, when read already).

    Raises
    ------
    ConfigError
        When the file is malformed, or the topology's scale-up bandwidth is not the one the
        calibration's efficiencies are fractions of.
    """
    cal = cal or load_calibration(path)
    name = topology or cal.topology
    assert name is not None and cal.sets_topology, "a calibration with scale_up or scale_out values"
    if topology is None:  # the file's own topology: a bad name is the file's field
        try:
            base = load_topology(name)
        except ConfigError as exc:
            if exc.field != "<file>":
                raise
            raise ConfigError(path, "topology", exc.expected, exc.got) from None
    else:
        base = load_topology(name)
    if cal.values:
        assert cal.bandwidth_GBps is not None
        have = base.scale_up.link.bandwidth_bytes_per_s / GBPS
        if abs(have - cal.bandwidth_GBps) > 1e-9 * cal.bandwidth_GBps:
            raise ConfigError(path, "scale_up.bandwidth_GBps", f"the topology's: {name} has {have:g} GB/s per GPU per "
                              "direction, and the calibration's efficiencies are fractions of its own (calibrate on "
                              f"{name}: llmsim calibrate --topology {name})", cal.bandwidth_GBps)
    if cal.scale_out:
        assert cal.nic_bandwidth_Gbps is not None
        nic = base.scale_out.nic.bandwidth_bytes_per_s / GBIT_PER_S
        if base.scale_out.kind is FabricKind.NONE or base.scale_out.nics_per_node != cal.nics_per_node or abs(
                nic - cal.nic_bandwidth_Gbps) > 1e-9 * cal.nic_bandwidth_Gbps:
            raise ConfigError(path, "scale_out", f"the topology's NICs: {name} has {base.scale_out.nics_per_node} x "
                              f"{nic:g} Gb/s per node ({base.scale_out.kind.value}), and the calibration's "
                              "efficiencies are fractions of its own (calibrate on "
                              f"{name}: llmsim calibrate --topology {name})",
                              f"{cal.nics_per_node} x {cal.nic_bandwidth_Gbps:g} Gb/s")
    topo = load_topology(name, cal.overrides())
    if notes is not None:
        parts = [f"{section} {', '.join(v.key for v in values)}"
                 for section, values in (("scale_up", cal.values), ("scale_out", cal.scale_out)) if values]
        notes.append(f"calibration {path}: {name} with {' and '.join(parts)} from "
                     "llmsim calibrate (each value's source is in the file)")
    return topo


def topology_option(calibration: str | None, topology: str | None,
                    notes: list[str]) -> str | TopologySpec | None:
    """What a command's ``--topology`` stands for once ``--calibration`` is applied: ``topology``
    itself without a calibration, the calibrated topology with one (the topology itself when
    the file has no scale_up or scale_out values)."""
    return apply_calibration(calibration, topology, notes)[0]


def apply_calibration(calibration: str | None, topology: str | None,
                      notes: list[str]) -> tuple[str | TopologySpec | None, CalibrationFactors | None]:
    """``--calibration FILE`` applied: what ``--topology`` stands for (:func:`topology_option`)
    and the factors for :func:`sim.runner.simulate` (None without any), each noted."""
    if calibration is None:
        return topology, None
    cal = load_calibration(calibration)
    topo: str | TopologySpec | None = topology
    if cal.sets_topology:
        topo = calibrated_topology(calibration, topology, notes, cal)
    factors = cal.calibration_factors()
    if cal.factors:
        notes.append(f"calibration {calibration}: " + ", ".join(f"{v.key} {v.value:g}" for v in cal.factors)
                     + " (fitted to measured runs by llmsim calibrate --runs; sim/costs/factors.py)")
    return topo, factors


def check_rows(rows: Sequence[dict]) -> tuple[dict, ...]:
    """``rows`` as the file's ``check`` list (plain numbers, fixed decimals)."""
    return tuple({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in rows)

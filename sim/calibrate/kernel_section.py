"""A calibration file's ``kernels`` section (``llmsim calibrate --kernels``), written and read::

    kernels:
      gpu: H100-SXM5-80GB           # the catalogue GPU the curves were measured on
      file: kernels.csv             # the table or trace they were read from
      device: NVIDIA H100 80GB HBM3 # what the table says it was measured on (null: it does not)
      launch_us: 2.0                # the launch gap taken off each time (the GPU's kernel_launch_s)
      peaks_TFLOPS: {bf16: 989.0, fp8: 1979.0}   # what the efficiencies are fractions of (checked, not set)
      curves:
        gemm_bf16: {value: [[1073741824.0, 0.288], ...], source: "kernels.csv: ..."}
      not_used: [...]               # bins and trace operators read and not used, and why
      check: [...]                  # each measured kernel: its time, the catalogue's and the calibrated GPU's

The curves' keys are :data:`CURVE_KEYS`; each point is ``[FLOPs,
efficiency in (0, 1]]``, FLOPs increasing. The GPU must be a catalogue GPU whose peaks are the
file's (the efficiencies are fractions of them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.calibrate.scale_up import CalibratedValue
from sim.costs.factors import ATTENTION_CURVES, GEMM_CURVE_PREFIX, KernelCurves
from sim.errors import ConfigError, Described
from sim.hardware import EfficiencyCurve, get_gpu, gpu_names
from sim.types import Dtype

__all__ = ["CHECK_KEYS", "CURVE_KEYS", "KERNEL_KEYS", "KernelSection", "parse_kernel_section"]

KERNEL_KEYS = ("gpu", "file", "device", "launch_us", "peaks_TFLOPS", "curves", "not_used", "check")
"""The keys of a ``kernels`` section."""
CHECK_KEYS = ("curve", "kernel", "flops", "samples", "measured_us", "catalogue_us", "calibrated_us", "error_before",
              "error_after")
"""The keys of a row of the section's ``check``."""
CURVE_KEYS = tuple(GEMM_CURVE_PREFIX + d.value for d in (Dtype.BF16, Dtype.FP8, Dtype.MXFP8, Dtype.NVFP4)) + tuple(
    ATTENTION_CURVES)
"""The curves a section may set, in the order they are written and printed."""


@dataclass(frozen=True)
class KernelSection:
    """The ``kernels`` section: the GPU, where its curves were read, the curves, the check."""

    gpu: str
    file: str
    device: str | None
    launch_us: float
    peaks_TFLOPS: tuple[tuple[str, float], ...]
    values: tuple[CalibratedValue, ...]
    not_used: tuple[str, ...] = ()
    check: tuple[dict, ...] = ()

    def to_dict(self) -> dict:
        return {"gpu": self.gpu, "file": self.file, "device": self.device, "launch_us": self.launch_us,
                "peaks_TFLOPS": dict(self.peaks_TFLOPS),
                "curves": {v.key: {"value": v.value, "source": v.source} for v in self.values},
                "not_used": list(self.not_used), "check": list(self.check)}

    def curves(self, path: str) -> KernelCurves:
        """The curves for :func:`sim.runner.simulate` (:class:`~sim.costs.factors.KernelCurves`),
        ``path`` the calibration file they are noted with."""
        curves = [(v.key, EfficiencyCurve(tuple((float(x), float(e)) for x, e in v.value)))  # type: ignore[union-attr]
                  for v in self.values]
        return KernelCurves.measured_on(get_gpu(self.gpu), curves, path)


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def parse_kernel_section(path: str, raw: object) -> KernelSection:
    """A file's ``kernels`` mapping, checked; a ConfigError naming ``path`` and the field."""
    if not isinstance(raw, dict):
        raise ConfigError(path, "kernels", f"a mapping of {list(KERNEL_KEYS)}", raw)
    for key in raw:
        if key not in KERNEL_KEYS:
            raise ConfigError(path, f"kernels.{key}", f"one of {list(KERNEL_KEYS)}", key)
    name = raw.get("gpu")
    if not isinstance(name, str) or name not in gpu_names():
        raise ConfigError(path, "kernels.gpu", f"the catalogue GPU the curves were measured on, one of {gpu_names()}",
                          name)
    gpu = get_gpu(name)
    file, device = raw.get("file"), raw.get("device")
    if not isinstance(file, str) or not file:
        raise ConfigError(path, "kernels.file", "the kernel table or trace the curves were read from", file)
    if device is not None and not isinstance(device, str):
        raise ConfigError(path, "kernels.device", "the device the table names, or null", device)
    launch = raw.get("launch_us")
    if not _number(launch) or abs(float(launch) - gpu.kernel_launch_s * 1e6) > 1e-9:  # type: ignore[arg-type]
        raise ConfigError(path, "kernels.launch_us", f"{name}'s launch gap, {gpu.kernel_launch_s * 1e6:g} us (the one "
                          "the curves were derived with)", launch)
    peaks = raw.get("peaks_TFLOPS")
    if not isinstance(peaks, dict) or not peaks:
        raise ConfigError(path, "kernels.peaks_TFLOPS", "the dense peaks (TFLOP/s) the efficiencies are fractions of, "
                          "by format", peaks)
    for word, value in peaks.items():
        dtype = next((d for d in Dtype if d.value == word), None)
        have = gpu.peak(dtype) / 1e12 if dtype is not None and gpu.supports(dtype) else None
        if have is None or not _number(value) or abs(value - have) > 1e-9 * have:
            raise ConfigError(path, f"kernels.peaks_TFLOPS.{word}", f"{name}'s dense peak in that format "
                              f"({have:g} TFLOP/s)" if have is not None else f"a format {name} has", value)
    curves = raw.get("curves")
    if not isinstance(curves, dict) or not curves:
        raise ConfigError(path, "kernels.curves", f"a mapping of some of {list(CURVE_KEYS)}", curves)
    values = []
    for key, entry in curves.items():
        field = f"kernels.curves.{key}"
        if key not in CURVE_KEYS:
            raise ConfigError(path, field, f"one of {list(CURVE_KEYS)}", key)
        if not (isinstance(entry, dict) and set(entry) == {"value", "source"} and isinstance(entry["source"], str)):
            raise ConfigError(path, field, "{value: [[FLOPs, efficiency], ...], source: 'where it came from'}", entry)
        dtype_word = key[len(GEMM_CURVE_PREFIX):] if key.startswith(GEMM_CURVE_PREFIX) else Dtype.BF16.value
        if dtype_word not in peaks:
            raise ConfigError(path, "kernels.peaks_TFLOPS", f"the {dtype_word} peak ({key} is a fraction of it)",
                              peaks)
        _check_points(path, f"{field}.value", entry["value"])
        values.append(CalibratedValue(key, entry["value"], entry["source"]))
    not_used = raw.get("not_used", [])
    if not (isinstance(not_used, list) and all(isinstance(x, str) for x in not_used)):
        raise ConfigError(path, "kernels.not_used", "a list of what was read and not used, and why (strings)",
                          not_used)
    check = raw.get("check", [])
    if not isinstance(check, list):
        raise ConfigError(path, "kernels.check", "a list of the measured kernels' check rows", check)
    for i, row in enumerate(check):
        _check_row(path, f"kernels.check[{i}]", row)
    return KernelSection(name, file, device, float(launch), tuple((str(k), float(v)) for k, v in peaks.items()),  # type: ignore[arg-type]
                         tuple(values), tuple(not_used), tuple(check))


def _check_row(path: str, field: str, row: object) -> None:
    """One row of the section's ``check`` (:func:`sim.calibrate.kernels.check_rows` writes them):
    every one of :data:`CHECK_KEYS`, and no other; a ConfigError naming the row and the key
    otherwise."""
    if not isinstance(row, dict):
        raise ConfigError(path, field, f"a mapping of {list(CHECK_KEYS)}", row)
    for key in row:
        if key not in CHECK_KEYS:
            raise ConfigError(path, f"{field}.{key}", f"one of {list(CHECK_KEYS)}", key)
    for key in CHECK_KEYS:
        if key not in row:
            raise ConfigError(path, f"{field}.{key}", f"the row's {key} (a row of check has {list(CHECK_KEYS)})",
                              Described("no such key"))
    if row["curve"] not in CURVE_KEYS:
        raise ConfigError(path, f"{field}.curve", f"one of {list(CURVE_KEYS)}", row["curve"])
    if not (isinstance(row["kernel"], str) and row["kernel"]):
        raise ConfigError(path, f"{field}.kernel", "the kernel's description (a string)", row["kernel"])
    if not (isinstance(row["samples"], int) and not isinstance(row["samples"], bool) and row["samples"] >= 1):
        raise ConfigError(path, f"{field}.samples", "a positive number of measurements", row["samples"])
    for key in ("flops", "measured_us", "catalogue_us", "calibrated_us"):
        if not (_number(row[key]) and row[key] > 0):
            raise ConfigError(path, f"{field}.{key}", "a positive number", row[key])
    for key in ("error_before", "error_after"):
        # written to 4 decimals: a kernel 20,000 times slower than the catalogue's reads -1.0
        if not (_number(row[key]) and row[key] >= -1):
            raise ConfigError(path, f"{field}.{key}", "a relative error (a number of at least -1)", row[key])


def _check_points(path: str, field: str, pairs: object) -> None:
    if not (isinstance(pairs, list) and pairs):
        raise ConfigError(path, field, "a list of [FLOPs, efficiency] pairs", pairs)
    last = 0.0
    for i, pair in enumerate(pairs):
        ok = isinstance(pair, list) and len(pair) == 2 and all(_number(x) for x in pair)
        if not ok or not last < pair[0] < math.inf or not 0 < pair[1] <= 1:
            raise ConfigError(path, f"{field}[{i}]", "[FLOPs, efficiency in (0, 1]], FLOPs increasing", pair)
        last = pair[0]

"""``llmsim calibrate --nccl-tests`` across nodes: the scale-out latency and efficiency curve
(issue #33), and the other collectives' logs as checks.

The committed 2 x 8 H100 log (tests/data/nccl_tests/h100-a3mega-2node-all_reduce.txt, with the
address it came from) calibrates dgx-h100's scale-out so that ``llmsim collective`` reproduces
its bus bandwidth within 5% at every size from 1 MiB up, where the preset was far off. A log
synthesized from the model at a chosen scale-out latency and efficiency (its times computed by
``llmsim collective`` on the topology so set, not measured) calibrates back to them. Bad input is
one line, exit 2.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

import sim
from sim.calibrate.calibration import calibrated_topology, load_calibration
from sim.calibrate.nccl_tests import log_bus_factor, parse_nccl_tests
from sim.calibrate.pricing import placement
from sim.cli import main
from sim.config import load_topology
from sim.hardware import EfficiencyCurve
from sim.studies.collective import collective
from sim.types import CollectiveKind

ROOT = Path(sim.__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "nccl_tests"
TWO_NODE = DATA / "h100-a3mega-2node-all_reduce.txt"
A100 = DATA / "azure-nd-a100-v4-all_reduce.txt"
ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+\s")


def file_busbw(path: Path, factor: float) -> dict[int, float]:
    """Bus bandwidth (GB/s) per size from the file's text: the faster of its out-of-place (column 6)
    and in-place (column 10) times, times ``factor``."""
    rows = [line.split() for line in path.read_text().splitlines() if ROW.match(line)]
    return {int(t[0]): int(t[0]) / (min(float(t[5]), float(t[9])) * 1e-6) * factor / 1e9 for t in rows}


def row_times(name: str, size: int, t_us: float, ranks: int) -> str:
    """A row's out-of-place and in-place ``time algbw busbw #wrong`` at ``t_us`` for test
    ``name`` over ``ranks``, the bandwidths as nccl-tests computes them from the printed time."""
    time = f"{t_us:.4f}"
    algbw = size / float(time) / 1e3
    group = f"{time}  {algbw:.2f}  {algbw * log_bus_factor(name, ranks):.2f}  0"
    return f"{group}  {group}"


def _calibrate(tmp_path: Path, *logs: Path | str, topology: str | None = None, name: str = "cal.yaml") -> Path:
    out = tmp_path / name
    argv = ["calibrate", "--nccl-tests", *map(str, logs), "-o", str(out)]
    assert main(argv + (["--topology", topology] if topology else [])) == 0
    return out


@pytest.fixture(scope="module")
def two_node_calibration(tmp_path_factory) -> str:
    """The text ``llmsim calibrate`` writes for the committed two-node log, made once for the
    tests that read or tamper with a copy of it (each calibration takes seconds)."""
    return _calibrate(tmp_path_factory.mktemp("two-node"), TWO_NODE).read_text()


def _two_node_copy(tmp_path: Path, text: str) -> Path:
    out = tmp_path / "cal.yaml"
    out.write_text(text)
    return out


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("llmsim: error: "), err
    return err


def test_the_two_node_log_is_reproduced_within_5_percent_from_1_MiB_and_was_not_before(tmp_path, capsys):
    out = _calibrate(tmp_path, TWO_NODE)
    measured = file_busbw(TWO_NODE, 2 * 15 / 16)
    sizes = [s for s in measured if s >= 2**20]
    assert len(sizes) == 14
    before, after = load_topology("dgx-h100"), calibrated_topology(str(out), None)
    errors_before, errors_after = [], []
    for s in sizes:
        for topo, errors in ((before, errors_before), (after, errors_after)):
            errors.append(collective(topo, CollectiveKind.ALL_REDUCE, s, 16).busbw_bytes_per_s / 1e9 / measured[s] - 1)
    assert max(map(abs, errors_after)) < 0.05, errors_after
    assert max(map(abs, errors_before)) > 0.5 and all(abs(b) > 0.05 for b in errors_before), errors_before
    cal = load_calibration(str(out))
    assert not cal.values and {v.key for v in cal.scale_out} == {"latency_us", "efficiency_by_size_bytes"}
    assert all(TWO_NODE.name in v.source for v in cal.scale_out)
    assert (cal.nics_per_node, cal.nic_bandwidth_Gbps) == (8, 400.0)
    check = [r for r in cal.check if r["log"] == TWO_NODE.name]
    assert [r["size_bytes"] for r in check] == sizes and all(abs(r["error"]) < 0.05 for r in check)
    assert "worst error from 1 MiB up" in capsys.readouterr().out


def synthetic_log(latency_us: float, efficiency: float, per_host: int = 8, hosts: int = 2,
                  collective_name: str = "all_reduce", topology: str = "dgx-h100", more: tuple[str, ...] = ()) -> str:
    """An all_reduce_perf (or all_gather_perf ...) log whose times are the model's, not measured: the
    topology with ``scale_out.latency_us`` and a constant ``scale_out.efficiency`` set (and the
    overrides ``more``), priced by ``llmsim collective`` over ``hosts`` nodes of ``per_host`` GPUs
    at 8 B .. 1 GiB."""
    topo = load_topology(topology, [f"scale_out.latency_us={latency_us}", f"scale_out.efficiency={efficiency}",
                                    *more])
    n = per_host * hosts
    kind = {"all_reduce": CollectiveKind.ALL_REDUCE, "all_gather": CollectiveKind.ALL_GATHER,
            "reduce_scatter": CollectiveKind.REDUCE_SCATTER, "alltoall": CollectiveKind.ALL_TO_ALL,
            "sendrecv": CollectiveKind.RING_EXCHANGE}[collective_name]
    per_rank = collective_name not in ("all_reduce", "sendrecv")  # nccl-tests' count: per peer or per rank
    lines = [f"# Collective test starting: {collective_name}_perf",
             "# synthesized by tests/unit/test_calibrate_scale_out.py from llmsim's own model (not measured)"]
    lines += [f"#  Rank {i:2d} Group  0 Pid  {i} on host{i // per_host} device {i % per_host} [0x00] "
              "NVIDIA H100 80GB HBM3" for i in range(n)]
    lines.append("#       size         count      type   redop    root     time   algbw   busbw #wrong     time"
                 "   algbw   busbw #wrong")
    for e in range(3, 31):
        size = 2**e
        if per_rank and size % (4 * n):
            continue
        t_us = collective(topo, kind, size, n).time_s * 1e6
        count = size // 4 // (n if per_rank else 1)
        lines.append(f"  {size:>10} {count:>10}  float  sum  -1  {row_times(collective_name, size, t_us, n)}")
    return "\n".join(lines) + "\n"


def test_a_log_synthesized_at_a_chosen_scale_out_calibrates_back_to_it(tmp_path):
    """At 4% of 400 Gb/s the NICs are the bottleneck at every size from 1 MiB up (as on the
    committed 2-node log, 4-49%): each point comes back as the efficiency chosen."""
    path = tmp_path / "synthetic-all_reduce.txt"
    path.write_text(synthetic_log(latency_us=20.0, efficiency=0.04))
    cal = load_calibration(str(_calibrate(tmp_path, path)))
    values = {v.key: v.value for v in cal.scale_out}
    assert values["latency_us"] == pytest.approx(20.0, abs=0.02)
    curve = values["efficiency_by_size_bytes"]
    assert [p[0] for p in curve] == [2**e for e in range(20, 31)]
    for size, eff in curve:
        assert eff == pytest.approx(0.04, abs=0.0002), size


def test_where_the_nics_are_not_the_bottleneck_the_point_nearest_the_topologys_own_is_kept(tmp_path):
    """At 60% the tree and NVLS-tree are NVLink-bound at most sizes (NVLS-tree's NICs carry an
    eighth of the buffer each way): the log's time is taken at a range of efficiencies, so the
    log bounds it only; each point reproduces the log and lies at most at dgx-h100's own 0.95,
    at it where the range reaches it."""
    path = tmp_path / "synthetic-all_reduce.txt"
    path.write_text(synthetic_log(latency_us=4.0, efficiency=0.6))
    out = _calibrate(tmp_path, path)
    curve = {v.key: v.value for v in load_calibration(str(out)).scale_out}["efficiency_by_size_bytes"]
    assert all(0.3 <= eff <= 0.95 for _, eff in curve), curve
    assert sum(eff == 0.95 for _, eff in curve) >= 3  # not 0.6 where the log cannot tell
    topo, chosen = calibrated_topology(str(out), None), load_topology("dgx-h100", ["scale_out.latency_us=4.0",
                                                                                 "scale_out.efficiency=0.6"])
    for size, _ in curve:
        want = collective(chosen, CollectiveKind.ALL_REDUCE, size, 16).time_s
        assert collective(topo, CollectiveKind.ALL_REDUCE, size, 16).time_s == pytest.approx(want, rel=0.002), size


def test_a_log_of_four_gpus_per_host_is_placed_on_the_first_four_of_each_node():
    text = ("# Collective test starting: all_reduce_perf\n"
            + "".join(f"#  Rank {i:2d} Group  0 Pid  1 on h{i // 4} device {i % 4} [0x00] NVIDIA H100 80GB HBM3\n"
                      for i in range(12))
            + "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
            "   1048576  262144  float  sum  -1  100.0  10.49  19.22  0  100.0  10.49  19.22  0\n")
    log = parse_nccl_tests(text, "p-all_reduce.txt")
    where = placement(log, load_topology("dgx-h100"), "dgx-h100")
    assert where.group == (0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19) and where.num_gpus == 24


def test_the_scale_up_is_calibrated_first_and_the_scale_out_on_it(tmp_path, capsys):
    one_node = tmp_path / "one-node-all_reduce.txt"
    one_node.write_text(synthetic_log(1.35, 0.95, per_host=8, hosts=1).replace("host0", "h"))
    two = tmp_path / "two-node-all_reduce.txt"
    two.write_text(synthetic_log(6.0, 0.5))
    cal = load_calibration(str(_calibrate(tmp_path, one_node, two)))
    assert cal.values and cal.scale_out
    assert one_node.name in cal.values[0].source and two.name in cal.scale_out[0].source
    roles = {Path(rec["file"]).name: rec.get("role") for rec in cal.logs}
    assert roles == {one_node.name: "scale_up", two.name: "scale_out"}
    assert "on the scale-up so calibrated" in capsys.readouterr().out


def test_the_calibration_file_round_trips(tmp_path, two_node_calibration):
    out = _two_node_copy(tmp_path, two_node_calibration)
    cal = load_calibration(str(out))
    again = tmp_path / "again.yaml"
    cal.write(again)
    assert again.read_text() == out.read_text()
    raw = yaml.safe_load(out.read_text())
    assert cal.to_dict() == raw and "scale_up" not in raw
    assert cal.overrides()[-1] == "scale_out.efficiency=null"


TAMPERED = {
    "efficiency above 1": ("- [8589934592, 0.", "- [8589934592, 1.", "scale_out.efficiency_by_size_bytes"),
    "an unknown key": ("  nics_per_node: 8", "  nics_per_node: 8\n  nic_count: 8", "scale_out.nic_count"),
    "NICs not a number": ("  nics_per_node: 8", "  nics_per_node: eight", "scale_out.nics_per_node"),
    "a negative latency": ("latency_us: {value: ", "latency_us: {value: -", "scale_out.latency_us"),
    "other NICs": ("nic_bandwidth_Gbps: 400.0", "nic_bandwidth_Gbps: 200.0", "scale_out"),
}


@pytest.mark.parametrize("name", sorted(TAMPERED))
def test_a_tampered_scale_out_section_is_one_line_exit_2(name, tmp_path, capsys, two_node_calibration):
    out = _two_node_copy(tmp_path, two_node_calibration)
    old, new, field = TAMPERED[name]
    text = out.read_text()
    assert old in text
    out.write_text(text.replace(old, new, 1))
    capsys.readouterr()
    assert main(["run", "tiny", "--calibration", str(out)]) == 2
    err = _one_error_line(capsys)
    assert str(out) in err and f" {field}" in err


def _topology_file(tmp_path: Path, old: str, new: str) -> Path:
    text = (ROOT / "topologies" / "dgx-h100.yaml").read_text()
    assert old in text
    path = tmp_path / "topo.yaml"
    path.write_text(text.replace(old, new))
    return path


def test_a_log_faster_than_the_nics_allow_is_one_line_naming_the_file_and_size(tmp_path, capsys):
    topo = _topology_file(tmp_path, "nics_per_node: 8 ", "nics_per_node: 2 ")
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--nccl-tests", str(TWO_NODE), "--topology", str(topo), "-o", str(out)]) == 2
    err = _one_error_line(capsys)
    assert str(TWO_NODE) in err and re.search(r"size \d+:", err) and "nics_per_node" in err
    assert not out.exists()


def test_a_multi_node_log_on_a_one_node_topology_is_one_line(tmp_path, capsys):
    topo = _topology_file(tmp_path, "kind: rail-optimized-fat-tree", "kind: none")
    assert main(["calibrate", "--nccl-tests", str(TWO_NODE), "--topology", str(topo), "-o",
                 str(tmp_path / "cal.yaml")]) == 2
    err = _one_error_line(capsys)
    assert str(TWO_NODE) in err and "nodes" in err and "no scale-out fabric" in err


def _run_json(tmp_path: Path, *argv: str) -> dict:
    out = tmp_path / "run.json"
    assert main(["run", "tiny", "--topology", "dgx-h100", *argv, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    for key in ("notes", "simulated_wall_s"):
        data.pop(key, None)
    data.get("simulation", {}).pop("simulated_wall_s", None)
    return data


def _without_wall(data: dict) -> str:
    return re.sub(r'"simulated_wall_s": [0-9.e-]+', "", json.dumps(data, sort_keys=True))


def test_a_scale_out_calibration_changes_collectives_across_nodes_only(tmp_path, capsys, two_node_calibration):
    cal = str(_two_node_copy(tmp_path, two_node_calibration))
    one_node = _without_wall(_run_json(tmp_path))
    assert _without_wall(_run_json(tmp_path, "--calibration", cal)) == one_node
    wide = ("--set", "system.num_gpus=16", "--set", "parallel.dp=4", "--set", "parallel.global_batch_size=16")
    plain = _run_json(tmp_path, *wide)["iteration_time_s"]
    calibrated = _run_json(tmp_path, *wide, "--calibration", cal)["iteration_time_s"]
    assert calibrated > plain * 1.05


def test_all_gather_and_reduce_scatter_logs_beside_a_scale_out_log_keep_curves_of_their_own(tmp_path, capsys):
    """Beside two nodes' all-reduce, which calibrates the NICs, an all-gather and a
    reduce-scatter log of the same nodes keep curves of their own between nodes; made at the
    scale-out the all-reduce calibrates to, each curve gives that back and each log is
    reproduced, its bus bandwidth read with nccl-tests' factor (n-1)/n."""
    logs = []
    for name in ("all_gather", "reduce_scatter"):
        path = tmp_path / f"synthetic-{name}.txt"
        path.write_text(synthetic_log(20.0, 0.04, collective_name=name))
        logs.append(path)
    two = tmp_path / "two-all_reduce.txt"
    two.write_text(synthetic_log(20.0, 0.04))
    cal = load_calibration(str(_calibrate(tmp_path, two, *logs)))
    roles = {Path(rec["file"]).name: rec.get("role") for rec in cal.logs}
    assert roles == {two.name: "scale_out", logs[0].name: "all_gather_scale_out_curve",
                     logs[1].name: "reduce_scatter_scale_out_curve"}
    for path, key in zip(logs, ("all_gather_efficiency_by_size_bytes", "reduce_scatter_efficiency_by_size_bytes")):
        own = next(v for v in cal.scale_out if v.key == key)
        assert all(eff == pytest.approx(0.04, abs=0.002) for _, eff in own.value), own.value
        rows = [r for r in cal.check if r["log"] == path.name]
        measured = file_busbw(path, 15 / 16)  # nccl-tests: busbw = size / t x (n-1)/n for both
        for r in rows:
            assert r["log_busbw_GBps"] == pytest.approx(measured[r["size_bytes"]], rel=1e-3)
            assert abs(r["error"]) < 0.002, r
    printed = capsys.readouterr().out
    assert "all-gather bus bandwidth over 16 GPUs on 2 nodes" in printed
    assert "calibrates the reduce-scatter's own curve between nodes" in printed


def test_an_unpriced_collective_is_listed_as_not_used_with_the_reason(tmp_path, capsys):
    path = tmp_path / "broadcast.txt"

    def as_broadcast(line: str) -> str:  # a broadcast's busbw is its algbw
        t = line.split()
        return "  ".join(t[:7] + [t[6]] + t[8:11] + [t[10]] + t[12:]) if ROW.match(line) else line
    text = synthetic_log(5.0, 0.7).replace("all_reduce_perf", "broadcast_perf")
    path.write_text("\n".join(as_broadcast(line) for line in text.splitlines()) + "\n")
    cal = load_calibration(str(_calibrate(tmp_path, TWO_NODE, path)))
    rec = next(r for r in cal.logs if r["file"] == str(path))
    assert rec["used"] is False and "does not price" in rec["not_used_because"]
    assert f"not used: {path}" in capsys.readouterr().out


@pytest.mark.parametrize("name, plan", [("all_gather", "ring"), ("reduce_scatter", "ring"),
                                        ("alltoall", "all-to-all"), ("sendrecv", "ring exchange")])
def test_with_no_all_reduce_log_another_collectives_log_calibrates(name, plan, tmp_path, capsys):
    """The issue's other collectives calibrate where no all-reduce log is given: across 4 nodes
    the NIC latency and efficiency they were made at come back (the NICs bind from 4 MiB up at
    30%), one node's link curve and latency likewise (the synthetic one-node log is the preset's
    own, so it comes back unchanged), and each log is reproduced."""
    four = tmp_path / f"four-{name}.txt"
    four.write_text(synthetic_log(latency_us=6.0, efficiency=0.3, hosts=4, collective_name=name))
    cal = load_calibration(str(_calibrate(tmp_path, four)))
    values = {v.key: v.value for v in cal.scale_out}
    assert values["latency_us"] == pytest.approx(6.0, abs=0.02)
    for size, eff in values["efficiency_by_size_bytes"]:
        if size >= 4 * 2**20:
            assert eff == pytest.approx(0.3, abs=0.002), size
    assert {Path(rec["file"]).name: rec.get("role") for rec in cal.logs} == {four.name: "scale_out"}
    assert all(abs(r["error"]) < 0.002 for r in cal.check), cal.check
    assert f"{name}_perf over 32 GPUs on 4 nodes" in values_source(cal, "latency_us")
    one = tmp_path / f"one-{name}.txt"
    one.write_text(synthetic_log(1.35, 0.95, per_host=8, hosts=1, collective_name=name).replace("host0", "h"))
    up = load_calibration(str(_calibrate(tmp_path, one)))
    keys = {v.key: v for v in up.values}
    assert set(keys) == {"collective_latency_us", "efficiency_by_size_bytes"}  # the ring's; NVLS stays the preset's
    own = load_topology("dgx-h100")
    assert keys["collective_latency_us"].value == pytest.approx(own.scale_up.collective_latency_s * 1e6, abs=0.02)
    for size, eff in keys["efficiency_by_size_bytes"].value:
        assert eff == pytest.approx(own.scale_up.link.efficiency(size), abs=0.002), size
    assert all(abs(r["error"]) < 0.002 for r in up.check)
    assert f"calibrated as {plan} from {one.name}" in capsys.readouterr().out


def _one_node_log(name: str, topo, path: Path) -> Path:
    """A one-node log of ``name`` priced by ``llmsim collective`` on ``topo`` (not measured)."""
    kind = {"all_reduce": CollectiveKind.ALL_REDUCE, "alltoall": CollectiveKind.ALL_TO_ALL,
            "sendrecv": CollectiveKind.RING_EXCHANGE, "all_gather": CollectiveKind.ALL_GATHER,
            "reduce_scatter": CollectiveKind.REDUCE_SCATTER}[name]
    lines = [f"# Collective test starting: {name}_perf", "# synthesized from llmsim's model (not measured)"]
    lines += [f"#  Rank {i:2d} Group  0 Pid  {i} on h device {i} [0x00] NVIDIA H100 80GB HBM3" for i in range(8)]
    lines.append("#       size         count      type   redop    root     time   algbw   busbw #wrong     time"
                 "   algbw   busbw #wrong")
    for e in range(5, 31):
        t_us = collective(topo, kind, 2**e, 8).time_s * 1e6
        count = 2**e // 4 // (8 if name in ("alltoall", "all_gather", "reduce_scatter") else 1)
        lines.append(f"  {2**e:>10} {count:>10}  float  sum  -1  {row_times(name, 2**e, t_us, 8)}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("name", ["alltoall", "sendrecv"])
def test_one_nodes_all_to_all_or_sendrecv_log_gives_back_the_curve_it_was_made_at(name, tmp_path):
    """A one-node log made on a scale-up of 8 us latency and a link curve from 0.2 at 1 MiB to
    0.6 at 1 GiB (times from llmsim collective, not measured) gives that curve back point for
    point; the all-to-all gives the latency back too, while sendrecv, which the simulator prices
    as a ring exchange paying its route's hop and no collective latency, leaves the preset's."""
    made = ["scale_up.efficiency_by_size_bytes=[[1048576, 0.2], [1073741824, 0.6]]",
            "scale_up.collective_latency_us=8"]
    topo = load_topology("dgx-h100", made)
    cal = load_calibration(str(_calibrate(tmp_path, _one_node_log(name, topo, tmp_path / f"{name}.txt"))))
    keys = {v.key: v.value for v in cal.values}
    for size, eff in keys["efficiency_by_size_bytes"]:
        assert eff == pytest.approx(topo.scale_up.link.efficiency(size), abs=0.0002), size
    preset = load_topology("dgx-h100").scale_up.collective_latency_s * 1e6
    assert keys["collective_latency_us"] == pytest.approx(8.0 if name == "alltoall" else preset, abs=0.02)
    assert all(abs(r["error"]) < 0.001 for r in cal.check)
    assert max(abs(r["error_before"]) for r in cal.check) > 0.2  # the preset was far from the log


def test_an_all_reduce_log_calibrates_before_an_all_gather_log(tmp_path):
    ag = tmp_path / "two-all_gather.txt"
    ag.write_text(synthetic_log(20.0, 0.04, collective_name="all_gather"))
    ar = tmp_path / "two-all_reduce.txt"
    ar.write_text(synthetic_log(20.0, 0.04))
    cal = load_calibration(str(_calibrate(tmp_path, ag, ar)))  # the all-gather given first
    assert {Path(rec["file"]).name: rec.get("role") for rec in cal.logs} == {ag.name: "all_gather_scale_out_curve",
                                                                          ar.name: "scale_out"}


def values_source(cal, key: str) -> str:
    return next(v.source for v in cal.scale_out if v.key == key)


_SHORT = {"alltoall": "a2a", "sendrecv": "sr", "all_gather": "ag", "reduce_scatter": "rs"}


def _beside_an_all_reduce(tmp_path: Path, first: str, second: str):
    """dgx-h100 and the calibration of one node's all-reduce made on it, given between a log of
    ``first`` made at a 0.2..0.6 link curve and one of ``second`` at 0.3..0.9 (files
    ``ar.txt`` and the tests' short names, ``a2a.txt``, ``sr.txt``, ``ag.txt``, ``rs.txt``)."""
    preset = load_topology("dgx-h100")
    ar = _one_node_log("all_reduce", preset, tmp_path / "ar.txt")
    made = [_one_node_log(name, load_topology("dgx-h100", [
        f"scale_up.efficiency_by_size_bytes=[[1048576, {lo}], [1073741824, {hi}]]"]), tmp_path / f"{_SHORT[name]}.txt")
        for name, (lo, hi) in ((first, (0.2, 0.6)), (second, (0.3, 0.9)))]
    return preset, load_calibration(str(_calibrate(tmp_path, made[0], ar, made[1])))


def _links_kept_and_each_log_reproduced(preset, cal, *own: str) -> None:
    """The link curve is the preset's (the all-reduce was made on it), every log is reproduced
    within 0.2%, and the ``own`` logs were more than 30% off on the preset."""
    keys = {v.key: v for v in cal.values}
    for size, eff in keys["efficiency_by_size_bytes"].value:
        assert eff == pytest.approx(preset.scale_up.link.efficiency(size), abs=0.002), size
    for log in ("ar.txt", *own):
        rows = [r for r in cal.check if r["log"] == log]
        assert rows and all(abs(r["error"]) < 0.002 for r in rows), log
    assert min(max(abs(r["error_before"]) for r in cal.check if r["log"] == log) for log in own) > 0.3


def test_beside_an_all_reduce_log_all_to_all_and_sendrecv_logs_keep_curves_of_their_own(tmp_path, capsys):
    """One node's all-reduce calibrates the links; an all-to-all and a sendrecv log of the same
    node, made where those run at other rates than the all-reduce's links (0.2..0.6 and 0.3..0.9
    curves), each get a curve of their own, and all three logs are reproduced, where before the
    two were checks 40-60% off. The link curves stay the all-reduce's."""
    preset, cal = _beside_an_all_reduce(tmp_path, "alltoall", "sendrecv")
    roles = {Path(rec["file"]).name: rec.get("role") for rec in cal.logs}
    assert roles == {"ar.txt": "scale_up", "a2a.txt": "alltoall_curve", "sr.txt": "sendrecv_curve"}
    keys = {v.key: v for v in cal.values}
    assert {"alltoall_efficiency_by_size_bytes", "p2p_efficiency_by_size_bytes"} <= set(keys)
    assert "alltoall_perf over 8 GPUs of one node" in keys["alltoall_efficiency_by_size_bytes"].source
    _links_kept_and_each_log_reproduced(preset, cal, "a2a.txt", "sr.txt")
    printed = capsys.readouterr().out
    assert "calibrates the all-to-all's own curve" in printed
    assert "calibrates point-to-point sends' own curve" in printed


def test_an_own_curve_prices_its_collective_inside_a_domain_only():
    """``scale_up.alltoall_efficiency_by_size_bytes`` and ``p2p_efficiency_by_size_bytes`` price the
    all-to-all and the point-to-point sends of a group inside one NVSwitch domain; the all-reduce,
    and the same collectives across nodes, keep the links' curves."""
    own = ["scale_up.alltoall_efficiency_by_size_bytes=[[1048576, 0.1], [1073741824, 0.1]]",
           "scale_up.p2p_efficiency_by_size_bytes=[[1048576, 0.1], [1073741824, 0.1]]"]
    base, slow = load_topology("dgx-h100"), load_topology("dgx-h100", own)
    size = 2**28
    for kind in (CollectiveKind.ALL_TO_ALL, CollectiveKind.RING_EXCHANGE):
        assert collective(slow, kind, size, 8).time_s > 3 * collective(base, kind, size, 8).time_s, kind
        assert collective(slow, kind, size, 16).time_s == pytest.approx(collective(base, kind, size, 16).time_s,
                                                                         rel=1e-12), kind
    assert collective(slow, CollectiveKind.ALL_REDUCE, size, 8).time_s == \
        collective(base, CollectiveKind.ALL_REDUCE, size, 8).time_s


def test_beside_an_all_reduce_log_all_gather_and_reduce_scatter_logs_keep_ring_curves_of_their_own(tmp_path,
                                                                                                   capsys):
    """One node's all-reduce calibrates the links; an all-gather and a reduce-scatter log of the
    same node, made where their rings run at other rates (0.2..0.6 and 0.3..0.9 curves), each get
    a ring curve of their own and are reproduced, where before they were checks priced on the
    all-reduce's links. The link curves stay the all-reduce's."""
    preset, cal = _beside_an_all_reduce(tmp_path, "all_gather", "reduce_scatter")
    roles = {Path(rec["file"]).name: rec.get("role") for rec in cal.logs}
    assert roles == {"ar.txt": "scale_up", "ag.txt": "all_gather_curve", "rs.txt": "reduce_scatter_curve"}
    keys = {v.key: v for v in cal.values}
    assert "all_gather_perf over 8 GPUs of one node" in keys["all_gather_efficiency_by_size_bytes"].source
    assert "reduce_scatter_perf over 8 GPUs of one node" in keys["reduce_scatter_efficiency_by_size_bytes"].source
    for key, lo, hi in (("all_gather_efficiency_by_size_bytes", 0.2, 0.6),
                        ("reduce_scatter_efficiency_by_size_bytes", 0.3, 0.9)):
        made = EfficiencyCurve(((1048576.0, lo), (1073741824.0, hi)))
        # the curve it was made at, at the largest size, where the collective latency (the
        # all-reduce log's, a few microseconds from the one the log was made at) weighs least
        size, eff = keys[key].value[-1]
        assert size == 2**30 and eff == pytest.approx(made(size), abs=0.003), key
    _links_kept_and_each_log_reproduced(preset, cal, "ag.txt", "rs.txt")
    printed = capsys.readouterr().out
    assert "calibrates the all-gather's own curve" in printed and "calibrates the reduce-scatter's own curve" in printed


@pytest.mark.parametrize("section, efficiency, inside, other_n", [("scale_up", 0.1, 8, 16), ("scale_out", 0.05, 16, 8)])
def test_a_ring_curve_of_its_own_prices_only_its_collective_where_it_applies(section, efficiency, inside, other_n):
    """``scale_up.all_gather_efficiency_by_size_bytes`` and ``reduce_scatter_efficiency_by_size_bytes``
    price the all-gather and reduce-scatter rings of a group inside one NVSwitch domain;
    ``scale_out.``'s the same collective's ring hops between nodes. The same collective on the
    other side, the other ring collective and the all-reduce keep the links' curves."""
    curve = f"[[1048576, {efficiency}], [1073741824, {efficiency}]]"
    base = load_topology("dgx-h100")
    size = 2**28
    for kind, key in ((CollectiveKind.ALL_GATHER, "all_gather"), (CollectiveKind.REDUCE_SCATTER, "reduce_scatter")):
        slow = load_topology("dgx-h100", [f"{section}.{key}_efficiency_by_size_bytes={curve}"])
        other = CollectiveKind.REDUCE_SCATTER if kind is CollectiveKind.ALL_GATHER else CollectiveKind.ALL_GATHER
        assert collective(slow, kind, size, inside).time_s > 3 * collective(base, kind, size, inside).time_s, kind
        for k, n in ((kind, other_n), (other, inside), (CollectiveKind.ALL_REDUCE, inside)):
            assert collective(slow, k, size, n).time_s == collective(base, k, size, n).time_s, (kind, k, n)


@pytest.mark.parametrize("name, words", [("alltoall", "all-to-all"), ("all_gather", "all-gather"),
                                         ("reduce_scatter", "reduce-scatter")])
def test_beside_a_scale_out_log_a_log_across_nodes_keeps_a_curve_of_its_own(name, words, tmp_path, capsys):
    """Two nodes' all-reduce calibrates the NICs (made at 6 us and 0.30); an all-to-all,
    all-gather or reduce-scatter log of the same nodes, made where its sends (ring hops) between
    nodes run at 0.15 of the NICs, gets a curve of its own between nodes
    (``scale_out.<name>_efficiency_by_size_bytes``) that gives 0.15 back where the NICs bound
    it, and is reproduced, where on the NICs' curve it was a check faster than its log."""
    key = "alltoall" if name == "alltoall" else name
    ar = tmp_path / "two-all_reduce.txt"
    ar.write_text(synthetic_log(6.0, 0.30))
    log = tmp_path / f"two-{name}.txt"
    log.write_text(synthetic_log(6.0, 0.30, collective_name=name, more=(
        f"scale_out.{key}_efficiency_by_size_bytes=[[1048576, 0.15], [1073741824, 0.15]]",)))
    cal = load_calibration(str(_calibrate(tmp_path, log, ar)))
    roles = {Path(rec["file"]).name: rec.get("role") for rec in cal.logs}
    assert roles == {ar.name: "scale_out", log.name: f"{name}_scale_out_curve"}
    own = next(v for v in cal.scale_out if v.key == f"{key}_efficiency_by_size_bytes")
    assert f"{name}_perf over 16 GPUs on 2 nodes" in own.source
    # the curve it was made at, from 4 MiB up (below, a ring's time takes a range of efficiencies:
    # the point found reproduces the log all the same)
    assert all(eff == pytest.approx(0.15, abs=0.002) for size, eff in own.value if size >= 4 * 2**20)
    for each in (ar.name, log.name):
        rows = [r for r in cal.check if r["log"] == each]
        assert rows and all(abs(r["error"]) < 0.002 for r in rows), each
    assert min(r["error_before"] for r in cal.check if r["log"] == log.name) > 0.05
    assert f"calibrates the {words}'s own curve between nodes" in capsys.readouterr().out


def test_an_all_to_all_curve_between_nodes_prices_only_its_sends_between_nodes():
    """``scale_out.alltoall_efficiency_by_size_bytes`` prices an all-to-all's sends between nodes;
    the same all-to-all inside one node, and every other collective across nodes, are unchanged."""
    slow = load_topology("dgx-h100", ["scale_out.alltoall_efficiency_by_size_bytes=[[1048576, 0.05], "
                                      "[1073741824, 0.05]]"])
    base = load_topology("dgx-h100")
    size = 2**28
    assert collective(slow, CollectiveKind.ALL_TO_ALL, size, 16).time_s > \
        3 * collective(base, CollectiveKind.ALL_TO_ALL, size, 16).time_s
    for kind, n in ((CollectiveKind.ALL_TO_ALL, 8), (CollectiveKind.ALL_REDUCE, 16), (CollectiveKind.ALL_GATHER, 16)):
        assert collective(slow, kind, size, n).time_s == collective(base, kind, size, n).time_s, (kind, n)

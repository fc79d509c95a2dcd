"""Real nccl-tests logs from public threads and repositories (issue #33): each parses, and each log
that calibrates (all-reduce, and on their own the all-gather, reduce-scatter, all-to-all and
sendrecv logs) is reproduced within 5% at every size from 1 MiB up by the calibrated topology.

The logs are in tests/data/nccl_tests/, each with its ``# source:`` address and a ``# system:``
line saying what the thread says the machine is; their numbers are copied as published. A log
the topology model cannot represent is not hidden: its test asserts what is true of it (the
refusal, and why), and docs/calibrate.md lists it with the reason.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import sim
from sim.calibrate.calibration import calibrated_topology, load_calibration
from sim.calibrate.nccl_tests import read_nccl_tests
from sim.calibrate.pricing import PRICED, excluded_algorithms, log_busbw_GBps, placement, price_busbw_GBps
from sim.cli import main
from sim.config import load_topology
from sim.studies.collective import bus_factor, collective
from sim.types import CollectiveAlgorithm, CollectiveKind

ROOT = Path(sim.__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "nccl_tests"
MiB = 2**20

# file: (collective, ranks, nodes, GPU, NCCL version, sizes)
REAL = {
    "h100-xe9680-2node-all_reduce.txt": ("all_reduce", 16, 2, "NVIDIA H100 80GB HBM3", "2.26.2", 32),
    "h100-hgx-vm-4node-all_reduce.txt": ("all_reduce", 32, 4, "NVIDIA H100 80GB HBM3", "2.26.2", 32),
    "h100-ib400-4node-all_reduce.txt": ("all_reduce", 32, 4, "NVIDIA H100 80GB HBM3", None, 14),
    "h100-ib400-8node-all_reduce.txt": ("all_reduce", 64, 8, "NVIDIA H100 80GB HBM3", None, 14),
    "h100-ib400-2node-ring-all_reduce.txt": ("all_reduce", 16, 2, "NVIDIA H100 80GB HBM3", None, 14),
    # one node of xxrjun/nccl-tests-cluster's example-cluster01, five tests in turn, 32 MiB .. 16 GiB
    "h100-cluster01-1node-all_reduce.txt": ("all_reduce", 8, 1, "NVIDIA H100 80GB HBM3", "2.29.2", 10),
    "h100-cluster01-1node-all_gather.txt": ("all_gather", 8, 1, "NVIDIA H100 80GB HBM3", "2.29.2", 10),
    "h100-cluster01-1node-reduce_scatter.txt": ("reduce_scatter", 8, 1, "NVIDIA H100 80GB HBM3", "2.29.2", 10),
    "h100-cluster01-1node-alltoall.txt": ("alltoall", 8, 1, "NVIDIA H100 80GB HBM3", "2.29.2", 10),
    "h100-cluster01-1node-sendrecv.txt": ("sendrecv", 8, 1, "NVIDIA H100 80GB HBM3", "2.29.2", 10),
    # ten nodes of the same cluster, the same tests
    "h100-cluster01-10node-all_gather.txt": ("all_gather", 80, 10, "NVIDIA H100 80GB HBM3", "2.29.2", 10),
    "h100-cluster01-10node-reduce_scatter.txt": ("reduce_scatter", 80, 10, "NVIDIA H100 80GB HBM3", "2.29.2", 10),
    "h100-cluster01-10node-alltoall.txt": ("alltoall", 80, 10, "NVIDIA H100 80GB HBM3", "2.29.2", 10),
}
CALIBRATED = ["h100-xe9680-2node-all_reduce.txt", "h100-hgx-vm-4node-all_reduce.txt",
              "h100-ib400-4node-all_reduce.txt", "h100-ib400-8node-all_reduce.txt",
              "h100-cluster01-1node-all_reduce.txt", "h100-cluster01-1node-all_gather.txt",
              "h100-cluster01-1node-reduce_scatter.txt", "h100-cluster01-1node-alltoall.txt",
              "h100-cluster01-1node-sendrecv.txt", "h100-cluster01-10node-all_gather.txt",
              "h100-cluster01-10node-reduce_scatter.txt"]
"""The logs the topology reproduces within 5% from 1 MiB up once calibrated, each alone (a one-node
log calibrates the scale-up, a log across nodes the scale-out; an all-gather, reduce-scatter,
all-to-all or sendrecv log calibrates in an all-reduce's place when given without one). The
ten-node all-to-all does too (50.8% before, 0.1% after, docs/calibrate.md), not re-run here: the
scale-out's bisections over its 80 ranks' 6,320 sends take 40 s; its curve of its own beside the
ten-node all-gather is
(:func:`test_ten_nodes_reduce_scatter_and_all_to_all_beside_their_all_gather_keep_curves_of_their_own`)."""


def _calibrate(tmp_path: Path, *logs: Path, topology: str | None = None) -> Path:
    out = tmp_path / "cal.yaml"
    argv = ["calibrate", "--nccl-tests", *map(str, logs), "-o", str(out)]
    assert main(argv + (["--topology", topology] if topology else [])) == 0
    return out


@pytest.mark.parametrize("name", sorted(REAL))
def test_each_real_log_names_its_source_and_parses_to_what_its_text_says(name):
    path = DATA / name
    lines = path.read_text().splitlines()
    assert re.match(r"# source: https://github\.com/\S+", lines[0]), lines[0]
    assert lines[1].startswith("# system: ") and len(lines[1]) > 40, lines[1]
    log = read_nccl_tests(path)
    collective, ranks, nodes, device, version, sizes = REAL[name]
    assert (log.collective, log.ranks, log.nodes, log.devices, log.nccl_version, len(log.rows)) == (
        collective, ranks, nodes, (device,), version, sizes)


@pytest.mark.parametrize("name", sorted(REAL))
def test_each_real_log_s_bandwidths_agree_with_its_times(name):
    """A check of the copy: each printed algbw is size / time and each busbw size / time times
    nccl-tests' factor, within the printed roundings (``src/common.cu`` prints a time with 2
    decimals under 100 us, 1 under 10,000 and none above, a bandwidth with 2): a digit mistyped
    in a time or a bandwidth breaks it."""
    log = read_nccl_tests(DATA / name)
    factor = bus_factor(PRICED[log.collective], log.ranks)
    for r in log.rows:
        for t, alg, bus in ((r.time_us, r.algbw_GBps, r.busbw_GBps),
                            (r.in_place_time_us, r.in_place_algbw_GBps, r.in_place_busbw_GBps)):
            assert t is not None and alg is not None and bus is not None
            half_ulp = 0.005 if t < 100 else 0.05 if t < 10000 else 0.5
            algbw = r.size_bytes / t / 1e3
            assert abs(alg - algbw) <= 0.0051 + algbw * half_ulp / t, (r.size_bytes, t, alg)
            assert abs(bus - algbw * factor) <= 0.0051 + algbw * factor * half_ulp / t, (r.size_bytes, t, bus)


@pytest.mark.parametrize("name", CALIBRATED)
def test_each_calibrated_log_is_reproduced_within_5_percent_from_1_MiB(name, tmp_path):
    path = DATA / name
    log = read_nccl_tests(path)
    out = _calibrate(tmp_path, path)
    measured = {s: bw for s, bw in log_busbw_GBps(log).items() if s >= MiB}
    topo, before = calibrated_topology(str(out), None), load_topology("dgx-h100")
    where = placement(log, topo, "dgx-h100")
    kind = PRICED[log.collective]
    errors = {s: price_busbw_GBps(kind, s, where, topo) / bw - 1 for s, bw in measured.items()}
    errors_before = {s: price_busbw_GBps(kind, s, where, before) / bw - 1 for s, bw in measured.items()}
    assert max(map(abs, errors.values())) < 0.05, errors
    assert max(map(abs, errors_before.values())) > 0.05, errors_before  # the preset alone did not
    cal = load_calibration(str(out))
    rows = [r for r in cal.check if r["log"] == name]
    assert [r["size_bytes"] for r in rows] == sorted(measured)
    for r in rows:
        assert r["log_busbw_GBps"] == pytest.approx(measured[r["size_bytes"]], abs=1e-4)
        assert r["error"] == pytest.approx(errors[r["size_bytes"]], abs=2e-4)
        assert r["role"] == ("scale_out" if log.nodes > 1 else "scale_up")


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("llmsim: error: "), err
    return err


def _at_full_efficiency(*more: str):
    """dgx-h100 with its NICs at efficiency 1 and no NIC latency (the fastest the scale-out can be),
    and ``more`` overrides."""
    return load_topology("dgx-h100", ["scale_out.latency_us=0", "scale_out.efficiency_by_size_bytes=null",
                                      "scale_out.efficiency=1.0", *more])


def test_the_2_node_log_is_nvls_tree_above_what_the_nics_carry_for_a_ring(tmp_path):
    """On 2 nodes NCCL runs NVLS-tree here (NVLink SHARP inside each node, a tree of the two
    nodes between them: the thread's NVIDIA engineer, "You should see NVLS being used with
    single-node runs, NVLSTree with multi-node"), whose bus bandwidth exceeds the NICs' line
    rate: 469 GB/s at 16 GiB over 8 x 400 Gb/s = 400 GB/s per node. No ring or tree reaches it
    even at a perfect scale-out; NVLS-tree, each GPU's eighth of the buffer crossing its own
    NIC, does, and the calibrated topology reproduces the log (the test above) with the
    planner choosing it from 64 MiB up (the tree below, as NCCL's tuner weighs latency there)."""
    path = DATA / "h100-xe9680-2node-all_reduce.txt"
    log = read_nccl_tests(path)
    assert log.nccl_algo is None  # NCCL chose
    measured = log_busbw_GBps(log)
    assert measured[16 * 2**30] > 1.15 * 8 * 400 / 8
    fastest = _at_full_efficiency()
    where = placement(log, fastest, "dgx-h100")
    no_nvls_tree = frozenset({CollectiveAlgorithm.NVLS_TREE})
    for s in (s for s in measured if s >= 16 * MiB):
        assert price_busbw_GBps(PRICED["all_reduce"], s, where, fastest, no_nvls_tree) < measured[s], s
    topo = calibrated_topology(str(_calibrate(tmp_path, path)), None)
    for s in (s for s in measured if s >= 64 * MiB):
        assert collective(topo, CollectiveKind.ALL_REDUCE, s, 16).algorithm == "nvls-tree", s


def test_the_2_node_ring_log_is_refused_its_nvlink_legs_are_faster_than_the_preset_s(tmp_path, capsys):
    """Not reproduced, and why: run with NCCL_ALGO=Ring (its launch line says so; priced as rings,
    not as the NVLS-tree or tree NCCL would pick) and NCCL_MIN_CTAS=24 (24 channels), this log is
    under the NICs' 400 GB/s at every size, yet faster than dgx-h100's rings allow with their
    NICs at efficiency 1 from 16 to 512 MiB: the rings' NVLink legs, at the preset's
    NVLink efficiency curve (a one-node ring all-reduce's, latency and NCCL's default channels
    folded in), are what bind there. With the NVLink curve at 1 as well, the model is faster
    than the log at every size: a one-node log of the same nodes would calibrate the scale-up
    first; the thread has none."""
    path = DATA / "h100-ib400-2node-ring-all_reduce.txt"
    log = read_nccl_tests(path)
    assert log.nccl_algo == "Ring"
    rings = excluded_algorithms(log.nccl_algo)
    measured = {s: bw for s, bw in log_busbw_GBps(log).items() if s >= MiB}
    assert max(measured.values()) < 8 * 400 / 8
    fastest_nics = _at_full_efficiency()
    fastest_both = _at_full_efficiency("scale_up.efficiency_by_size_bytes=null", "scale_up.efficiency=1.0")
    where = placement(log, fastest_nics, "dgx-h100")
    kind = PRICED["all_reduce"]
    slower = [s for s in measured if price_busbw_GBps(kind, s, where, fastest_nics, rings) < measured[s]]
    assert slower == [2**e for e in range(24, 30)], slower
    assert all(price_busbw_GBps(kind, s, where, fastest_both, rings) > measured[s] for s in measured)
    assert main(["calibrate", "--nccl-tests", str(path), "-o", str(tmp_path / "c.yaml")]) == 2
    line = _one_error_line(capsys)
    assert f"{path.name}: size {2**24}" in line and "NCCL_ALGO" not in line
    # the NVLink legs bind, not the NICs: the line asks for the one-node log first
    assert "give a one-node all_reduce_perf log of the same nodes first" in line and "other NICs" not in line


def test_docs_calibrate_md_lists_every_committed_log_with_its_source():
    text = (ROOT / "docs" / "calibrate.md").read_text()
    table = [line for line in text.splitlines() if line.startswith("| `") and "_perf" not in line]
    for path in sorted(DATA.glob("*.txt")):
        row = next((line for line in table if line.startswith(f"| `{path.name}` |")), None)
        assert row is not None, path.name
        if path.name in REAL:
            assert _cited(path.read_text().splitlines()[0]) in row, (path.name, row)


def _cited(source: str) -> str:
    """How docs/calibrate.md's table names a ``# source:`` address: ``owner/repo#N`` for an issue or
    pull request thread, ``owner/repo`` for a file in a repository."""
    m = re.match(r"# source: https://github\.com/([^/\s]+/[^/\s]+)(?:/(?:issues|pull)/(\d+))?", source)
    assert m, source
    return f"{m.group(1)}#{m.group(2)}" if m.group(2) else m.group(1)


def test_one_node_s_five_logs_together_are_each_reproduced_within_5_percent(tmp_path):
    """The cluster01 node's five logs given at once: its all-reduce calibrates the links and the
    other four keep curves of their own, so each is reproduced within 5% from 1 MiB up; priced on
    the all-reduce's links, the all-gather and reduce-scatter were 14% and 21% off at 32 MiB."""
    names = [f"h100-cluster01-1node-{c}.txt" for c in ("all_reduce", "all_gather", "reduce_scatter", "alltoall",
                                                      "sendrecv")]
    cal = load_calibration(str(_calibrate(tmp_path, *(DATA / n for n in names))))
    roles = {Path(rec["file"]).name: rec.get("role") for rec in cal.logs}
    assert roles == dict(zip(names, ("scale_up", "all_gather_curve", "reduce_scatter_curve", "alltoall_curve",
                                     "sendrecv_curve")))
    for name in names:
        rows = [r for r in cal.check if r["log"] == name]
        assert rows and max(abs(r["error"]) for r in rows) < 0.05, name
    ring_before = [max(abs(r["error_before"]) for r in cal.check if r["log"] == n) for n in names[1:3]]
    assert min(ring_before) > 0.10


def test_ten_nodes_reduce_scatter_and_all_to_all_beside_their_all_gather_keep_curves_of_their_own(tmp_path):
    """The cluster01 ten-node all-gather calibrates the NICs; the ten-node reduce-scatter and
    all-to-all keep curves of their own between nodes: each reproduced within 5% from 1 MiB up,
    where priced on the all-gather's curve the reduce-scatter was 6.9% off at 128 MiB and the
    all-to-all 70.6% at 32 MiB (the preset: 113.8% and 50.8%)."""
    names = ["h100-cluster01-10node-all_gather.txt", "h100-cluster01-10node-reduce_scatter.txt",
             "h100-cluster01-10node-alltoall.txt"]
    cal = load_calibration(str(_calibrate(tmp_path, *(DATA / n for n in names))))
    roles = {Path(rec["file"]).name: rec.get("role") for rec in cal.logs}
    assert roles == dict(zip(names, ("scale_out", "reduce_scatter_scale_out_curve", "alltoall_scale_out_curve")))
    for name in names:
        rows = [r for r in cal.check if r["log"] == name]
        assert rows and max(abs(r["error"]) for r in rows) < 0.05, name
        assert max(abs(r["error_before"]) for r in rows) > 0.05, name  # the preset alone did not
"""Tests for sim.output.trace_ranks: per-rank trace files read the way Holistic Trace Analysis reads them.

``_Hta`` below re-implements, independently of sim.output.trace_ranks, the steps of HTA's loader that
decide what our files mean to it (facebookresearch/HolisticTraceAnalysis, PyPI 0.5.0):
``hta/common/trace_file.py`` (which files, which rank), ``hta/common/trace_parser.py::_compress_df``
(which events survive, ``args.stream``/``args.correlation`` defaults),
``hta/common/trace_filter.py::_filter_gpu_kernels_with_cuda_sync`` (what a GPU kernel is),
``hta/utils/utils.py::get_kernel_type`` (0.5.0) and ``is_comm_kernel`` (0.2.0), and
``hta/analyzers/breakdown_analysis.py::get_temporal_breakdown`` (compute time = the union of the
computation kernels). It always runs. When HTA itself is installed, the last test runs it too.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import warnings

import pytest

from sim.cli import main
from sim.config import load_topology, load_workload
from sim.output.analysis import breakdown
from sim.output.trace import chrome_trace, validate_chrome_trace
from sim.output.trace_ranks import HOST_TID, hta_kernel_name, representative_note, write_rank_traces
from sim.runner import simulate
from sim.types import OpKind, Stream
from tests.conftest import make_workload

_RANK_RE = re.compile(r'"rank":\s+(\d+)')  # hta/common/trace_file.py::create_rank_to_trace_dict
_COMM_RE_05 = re.compile(r"^nccl.*Kernel")  # hta/utils/utils.py (0.5.0)
_MEMORY_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def _kernel_type(name: str) -> str:
    """HTA 0.5.0's get_kernel_type."""
    if _COMM_RE_05.match(name):
        return "COMMUNICATION"
    if _MEMORY_RE.match(name):
        return "MEMORY"
    if not _NOT_COMPUTE_RE.match(name):
        return "COMPUTATION"
    return "OTHER"


def _kernel_type_02(name: str) -> str:
    """HTA 0.2.0's get_kernel_type (``"ncclKernel" in name``)."""
    if "ncclKernel" in name:
        return "COMMUNICATION"
    return "MEMORY" if ("Memcpy" in name or "Memset" in name) else "COMPUTATION"


class _Hta:
    """What HTA's loader makes of a trace directory: {rank: (metadata, kernels, cpu events)}."""

    def __init__(self, directory: str) -> None:
        files = [f for f in os.listdir(directory) if f.endswith(".gz") or f.endswith(".json")]
        self.rank_files: dict[int, str] = {}
        self.rank_lines: dict[int, int] = {}
        for f in sorted(files):
            path = os.path.join(directory, f)
            rank, line_no = 0, -1  # HTA: no match -> rank 0
            with (gzip.open(path, "rb") if path.endswith("gz") else open(path)) as fh:
                for i, line in enumerate(fh):
                    data = line.decode() if isinstance(line, bytes) else line
                    m = _RANK_RE.search(data)
                    if m:
                        rank, line_no = int(m.group(1)), i
                        break
            self.rank_files[rank] = path
            self.rank_lines[rank] = line_no
        self.meta: dict[int, dict] = {}
        self.kernels: dict[int, list[dict]] = {}
        self.cpu: dict[int, list[dict]] = {}
        for rank, path in self.rank_files.items():
            with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as fh:
                record = json.loads(fh.read())
            self.meta[rank] = {k: v for k, v in record.items() if k != "traceEvents"}
            kernels, cpu = [], []
            for e in record["traceEvents"]:
                if e.get("dur") is None or e.get("cat") is None or e["cat"] == "Trace":
                    continue
                args = e.get("args") if isinstance(e.get("args"), dict) else {}
                try:
                    stream = int(args.get("stream", -1))
                except ValueError:
                    stream = -1
                row = {"name": e["name"], "cat": e["cat"], "ts": e["ts"], "dur": e["dur"], "stream": stream,
                       "correlation": args.get("correlation", -1), "tid": e.get("tid"), "pid": e.get("pid")}
                (kernels if stream >= 0 and row["correlation"] >= 0 else cpu).append(row)
            self.kernels[rank], self.cpu[rank] = kernels, cpu

    def union_us(self, rank: int, kernel_type: str, *, rounded: bool = False) -> float:
        """Merged length of one class of kernels, in µs: ``merge_kernel_intervals`` (a kernel
        joins the group before it unless it starts after every end so far; each group counts
        from its first start to its last end). ``rounded``: each kernel's start rounded up and
        its end down to whole µs first, as HTA does unless ``HTA_DISABLE_NS_ROUNDING`` is set
        (``hta/common/trace_parser.py::round_down_time_stamps``, pytorch/pytorch#122425)."""
        spans = [(k["ts"], k["ts"] + k["dur"]) for k in self.kernels[rank] if _kernel_type(k["name"]) == kernel_type]
        if rounded:
            spans = [(math.ceil(a), math.floor(b)) for a, b in spans]
        total, first, last, reach = 0.0, None, None, -math.inf
        for a, b in sorted(spans, key=lambda ab: ab[0]):
            if first is None or a > reach:
                total += 0.0 if first is None else last - first
                first, last = a, b
            else:
                last = max(last, b)
            reach = max(reach, b)
        return total + (0.0 if first is None else last - first)


def _run(workload, full=False, granularity="op"):
    return simulate(workload, load_topology("dgx-a100"), full=full, granularity=granularity)


@pytest.fixture(scope="module")
def tiny():
    return _run(load_workload("tiny"))


@pytest.fixture(scope="module")
def tiny_dir(tiny, tmp_path_factory):
    d = tmp_path_factory.mktemp("ranks")
    write_rank_traces(tiny.result, d)
    return d


def test_hta_finds_one_file_per_simulated_rank(tiny, tiny_dir):
    hta = _Hta(str(tiny_dir))
    simulated = sorted(info.rank for info in tiny.result.ranks)
    assert simulated == [0, 4] and sorted(hta.rank_files) == simulated
    for rank, path in hta.rank_files.items():
        assert os.path.basename(path) == f"rank-{rank}.json.gz"
        assert hta.rank_lines[rank] == 1  # the distributedInfo line, before any event
        info = hta.meta[rank]["distributedInfo"]
        assert info == {"backend": "nccl", "rank": rank, "world_size": tiny.result.world_size}


def test_kernels_are_the_merged_trace_slices_of_their_rank(tiny, tiny_dir):
    hta = _Hta(str(tiny_dir))
    merged = [e for e in chrome_trace(tiny.result)["traceEvents"] if e["ph"] == "X"]
    for rank in hta.rank_files:
        mine = sorted((e["tid"], e["ts"], e["dur"]) for e in merged if e["pid"] == rank)
        kernels = hta.kernels[rank]
        assert sorted((k["tid"], k["ts"], k["dur"]) for k in kernels) == mine
        assert all(k["cat"] == "kernel" and k["stream"] == k["tid"] and k["stream"] in set(Stream) for k in kernels)
        corr = [k["correlation"] for k in kernels]
        assert len(set(corr)) == len(corr) and min(corr) >= 1  # unique, so no kernel pairs with another
        # the host thread: only the iteration annotation, which HTA reads as iteration 0
        assert [(c["name"], c["tid"], c["stream"], c["ts"]) for c in hta.cpu[rank]] == [
            ("ProfilerStep#0", HOST_TID, -1, 0.0)]
        assert hta.cpu[rank][0]["dur"] == pytest.approx(tiny.result.makespan_s * 1e6, abs=1e-3)


@pytest.mark.parametrize("case", ["tiny", "cp-ep", "zero3", "layer"])
def test_kernel_classes_and_compute_time_as_hta_reads_them(case, tmp_path):
    """HTA's class of every kernel is the engine's (communication iff a comm kind), and HTA's
    compute time per rank is the report's compute time."""
    if case == "tiny":
        run = _run(load_workload("tiny"))
    elif case == "cp-ep":
        run = _run(make_workload(tp=2, cp=2, dp=2, ep=2, experts=4, sp=True, layers=2, gbs=4, seq=1024), full=True)
    elif case == "zero3":
        run = _run(make_workload(tp=2, pp=2, dp=2, zero=3, layers=4, gbs=8))
    else:
        run = _run(load_workload("tiny"), granularity="layer")
    write_rank_traces(run.result, tmp_path)
    hta = _Hta(str(tmp_path))
    comm_names = {s.name for s in run.result.spans if s.kind.is_comm}
    assert comm_names  # the case has communication to classify
    merged = {(e["pid"], e["tid"], e["ts"]): e for e in chrome_trace(run.result)["traceEvents"] if e["ph"] == "X"}
    rows = {r.rank: r for r in breakdown(run.result)}
    assert sorted(hta.rank_files) == sorted(rows)
    for rank in rows:
        for k in hta.kernels[rank]:
            source = merged[(rank, k["tid"], k["ts"])]
            is_comm = OpKind(source["args"]["kind"]).is_comm
            want = "COMMUNICATION" if is_comm else "COMPUTATION"
            assert (_kernel_type(k["name"]), _kernel_type_02(k["name"])) == (want, want), k["name"]
        n = len(hta.kernels[rank])
        assert hta.union_us(rank, "COMPUTATION") == pytest.approx(rows[rank].compute_s * 1e6, abs=1e-3 * n)


def test_comm_names():
    assert hta_kernel_name("ncclAllReduce proj-out", OpKind.COLLECTIVE) == "ncclKernel_AllReduce proj-out"
    assert hta_kernel_name("ncclSend pp", OpKind.P2P) == "ncclKernel_Send pp"
    assert hta_kernel_name("nccl ep L0", OpKind.COLLECTIVE) == "ncclKernel_ep L0"
    assert hta_kernel_name("ring exchange", OpKind.P2P) == "ncclKernel_ring exchange"
    assert hta_kernel_name("ncclKernel_x", OpKind.COLLECTIVE) == "ncclKernel_x"
    assert hta_kernel_name("ncclAllReduce", OpKind.GEMM) == "ncclAllReduce"  # compute names are kept


def test_each_file_is_a_valid_perfetto_trace_without_cross_file_arrows(tiny, tiny_dir):
    assert any(s.flow_out is not None for s in tiny.result.spans)  # the merged trace has arrows
    for rank in (0, 4):
        with gzip.open(tiny_dir / f"rank-{rank}.json.gz", "rb") as fh:
            obj = json.loads(fh.read())
        assert validate_chrome_trace(obj) == []
        events = obj["traceEvents"]
        assert {e["pid"] for e in events} == {rank}
        assert not [e for e in events if e["ph"] in ("s", "f")]
        assert [e for e in events if e["ph"] == "C" and e["name"] == "memory"]  # the rank's memory counter


def test_bytes_are_deterministic_and_gzip_and_plain_agree(tiny, tmp_path):
    a = write_rank_traces(tiny.result, tmp_path / "a")
    b = write_rank_traces(tiny.result, tmp_path / "b")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    plain = write_rank_traces(tiny.result, tmp_path / "c", compress=False)
    assert [p.name for p in plain] == ["rank-0.json", "rank-4.json"]
    assert [gzip.decompress(p.read_bytes()) for p in a] == [p.read_bytes() for p in plain]


def test_stale_rank_files_are_removed_others_kept(tiny, tmp_path):
    (tmp_path / "rank-7.json.gz").write_bytes(b"old")
    (tmp_path / "rank-9.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("mine")
    write_rank_traces(tiny.result, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "rank-0.json.gz", "rank-4.json.gz"]


def test_representative_note(tiny):
    note = representative_note(tiny.result)
    assert note is not None and "2 simulated ranks" in note and "all 8" in note
    assert representative_note(_run(load_workload("tiny"), full=True).result) is None


def test_cli_writes_rank_files_and_says_so(tmp_path, capsys):
    d = tmp_path / "hta"
    assert main(["run", "tiny", "--trace-dir", str(d), "--json", str(tmp_path / "r.json")]) == 0
    assert sorted(p.name for p in d.iterdir()) == ["rank-0.json.gz", "rank-4.json.gz"]
    notes = json.loads((tmp_path / "r.json").read_text())["notes"]
    assert any(n.startswith("per-rank traces") for n in notes)
    assert "per-rank traces (--trace-dir)" in capsys.readouterr().out


def test_cli_refuses_merged_trace_inside_the_rank_folder(tmp_path, capsys):
    d = tmp_path / "hta"
    assert main(["run", "tiny", "--trace-dir", str(d), "--trace", str(d / "all.json.gz")]) == 2
    err = capsys.readouterr().err
    assert "--trace" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not d.exists()


def test_real_hta_reads_the_files(tiny, tiny_dir, monkeypatch):
    """Holistic Trace Analysis itself, where installed (``pip install HolisticTraceAnalysis``)."""
    pytest.importorskip("hta")
    pytest.importorskip("pandas")
    from hta.trace_analysis import TraceAnalysis

    # HTA rounds each slice to whole µs (ts up, end down: pytorch/pytorch#122425) unless told not to
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ta = TraceAnalysis(trace_dir=str(tiny_dir))
        temporal = ta.get_temporal_breakdown(visualize=False)
        overlap = ta.get_comm_comp_overlap(visualize=False)
        kinds, _ = ta.get_gpu_kernel_breakdown(visualize=False)
    rows = {r.rank: r for r in breakdown(tiny.result)}
    assert sorted(ta.t.get_ranks()) == sorted(rows)
    for rec in temporal.to_dict("records"):
        assert rec["compute_time(us)"] == pytest.approx(rows[rec["rank"]].compute_s * 1e6, abs=0.5)
    assert sorted(overlap["rank"]) == sorted(rows)
    assert {"COMMUNICATION", "COMPUTATION"} <= set(kinds["kernel_type"])
    # with its rounding, HTA's compute time is that of the files' kernels rounded so, to the µs
    monkeypatch.delenv("HTA_DISABLE_NS_ROUNDING")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rounded = TraceAnalysis(trace_dir=str(tiny_dir)).get_temporal_breakdown(visualize=False)
    mine = _Hta(str(tiny_dir))
    for rec in rounded.to_dict("records"):
        assert rec["compute_time(us)"] == mine.union_us(rec["rank"], "COMPUTATION", rounded=True)
        assert rec["compute_time(us)"] < rows[rec["rank"]].compute_s * 1e6 - 1.0


def _bulk_and_plain(result):
    import sim.output.trace_ranks as tr

    bulk = tr._bulk_texts(result, "t", {"workload": "x", "n": 3})
    return (dict(bulk) if bulk is not None else None), dict(tr._plain_texts(result, "t", {"workload": "x", "n": 3}))


@pytest.mark.parametrize("sets", [[], ["parallel.pp=4", "parallel.dp=1", "parallel.sequence_parallel=true"]])
def test_files_from_the_merged_pieces_are_the_parsed_ones(sets):
    """The rank files written from the merged trace's pieces are, to the byte, those parsed from
    it and re-encoded: renamed comm kernels, correlation ids counted per rank across its streams,
    the memory and link counters, no arrows."""
    from sim.config import load_workload_with_notes

    w, notes = load_workload_with_notes("tiny", sets, None)
    r = simulate(w, load_topology("dgx-a100"), notes=notes, link_counters=2).result
    assert any(c.name.startswith("link ") for c in r.counters) and any(s.flow_out is not None for s in r.spans)
    bulk, plain = _bulk_and_plain(r)
    assert bulk is not None and bulk == plain
    assert '"correlation":1}}' in bulk[r.ranks[0].rank] and '"ncclKernel_' in bulk[r.ranks[0].rank]


def test_files_fall_back_to_parsing_where_the_pieces_would_differ(tiny):
    """A list-valued arg (written with spaces in the merged trace, compactly in a rank file) or a
    time the bulk writer does not take: the parsed path writes the files."""
    import dataclasses

    import sim.output.trace_ranks as tr
    from sim.results import Span

    s = tiny.result.spans[0]
    for odd in (s._replace(op_args=s.op_args + (("shares", ((1, 0.5),)),)), s._replace(end_s=2e5)):
        r = dataclasses.replace(tiny.result, spans=[odd] + tiny.result.spans[1:])
        assert isinstance(odd, Span) and tr._bulk_texts(r, "t", None) is None
        assert dict(tr._texts(r, "t", None)) == dict(tr._plain_texts(r, "t", None))


def test_texts_take_the_pieces_when_they_can(tiny, monkeypatch):
    import sim.output.trace_ranks as tr

    monkeypatch.setattr(tr, "_plain_texts", lambda *a: pytest.fail("parsed the merged trace"))
    assert len(dict(tr._texts(tiny.result, "t", None))) == len(tiny.result.ranks)

"""One trace file per simulated rank, laid out the way Holistic Trace Analysis (HTA) reads them.

HTA (facebookresearch/HolisticTraceAnalysis, read at PyPI release 0.5.0 and at 0.2.0) analyses a
*directory* of PyTorch-profiler (Kineto) traces, one file per rank. What it needs, and where it
says so:

* **Which files.** Every file in the directory whose name ends in ``.json`` or ``.gz``
  (``hta/common/trace_file.py::create_rank_to_trace_dict_from_dir``). So the directory must hold
  the rank files and nothing else of those suffixes: the merged timeline goes elsewhere.
* **Which rank.** The regex ``"rank":\\s+(\\d+)`` run over the file *line by line*; the first
  line that matches gives the rank (``create_rank_to_trace_dict``). It needs whitespace after
  the colon, and a file without a match silently becomes rank 0, overwriting any other rank 0.
  Each file here therefore starts with ``"distributedInfo": {"backend": "nccl", "rank": N,
  "world_size": W}`` on its own line, before any event, as Kineto writes it
  (``libkineto/src/output_json.cpp``).
* **Which events.** The parser drops events without ``dur`` or ``cat`` (metadata, counters and
  flows), drops ``cat == "Trace"``, reads ``args.stream`` as an int (-1, a CPU event, when it is
  missing) and ``args.correlation`` (-1 when missing; ``hta/configs/default_event_args.py``); a
  GPU kernel is an event with ``stream >= 0`` and ``correlation >= 0``
  (``hta/common/trace_parser.py::_compress_df``,
  ``hta/utils/utils.py::normalize_gpu_stream_numbers``,
  ``hta/common/trace_filter.py::_filter_gpu_kernels_with_cuda_sync``). Every slice here carries
  ``args.stream`` (the :class:`~sim.types.Stream` value, also its ``tid``), ``args.device`` and
  a ``correlation`` id unique in its file, with ``cat`` ``"kernel"`` as Kineto writes kernels.
* **What a kernel is.** Decided by its name (``hta/utils/utils.py::get_kernel_type``):
  communication when it matches ``^nccl.*Kernel`` (0.5.0) or contains ``ncclKernel`` (0.2.0),
  memory when it starts ``Memcpy``/``Memset``/``dma``, computation otherwise, except names that
  contain ``Memcpy`` or ``Sync`` (``is_compute_kernel``), which are "other". A communication
  span is renamed here ``ncclKernel_<its name without the "nccl">``
  (``ncclAllReduce proj-out`` -> ``ncclKernel_AllReduce proj-out``), which both rules
  classify as communication, in the form older NCCL releases named their kernels
  (``ncclKernel_AllReduce_RING_LL_Sum_float``; newer ones ``ncclDevKernel_...``, which HTA 0.2.0
  misses). Compute spans keep the engine's names.
* **Which iteration.** A ``ProfilerStep#0`` annotation on the host thread spans the simulated
  iteration: HTA numbers iterations from ``ProfilerStep#N`` names
  (``hta/common/trace.py::add_iteration``) and, with a single step, keeps every kernel.

The host is not simulated, so there are no ``cuda_runtime`` launch events: HTA pairs a kernel
with a launch by correlation id and, finding none, leaves the kernel unpaired
(``transform_correlation_to_index``), which its GPU analyses (temporal breakdown, kernel
breakdown, communication/computation overlap, idle time) do not need; analyses of the host
(kernel launch statistics, the host-wait share of idle time) have nothing to work on.

Everything else comes from :func:`sim.output.trace.chrome_trace`, the merged timeline, filtered by
``pid`` (= global rank): the same ``ts``/``dur`` to the nanosecond, the same args, process and
thread names, and each rank's memory counter, so a per-rank file opens in Perfetto as that
rank's part of the merged trace. The p2p arrows are left out, with the ``"p2p arrival"``
instants they end at: their two ends are in different files. In representative mode (the
default) only the simulated ranks, one per pipeline stage, get a file;
:func:`representative_note` says so in the run's notes. The bytes are deterministic: same
result, same files (gzip by :class:`sim.output.gzip_parts.GzipParts`: ``mtime=0``, no file name).
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from sim.output.gzip_parts import GzipParts
from sim.output.trace import US_PER_S, Bulk, chrome_trace, counter_batch, counter_columns
from sim.results import SimResult
from sim.types import OpKind

__all__ = ["HOST_TID", "rank_traces", "write_rank_traces", "hta_kernel_name", "rank_file_name",
           "representative_note"]

HOST_TID = 1
"""Thread id of the host thread in a rank file (below every :class:`~sim.types.Stream` value)."""
_STEP = "ProfilerStep#0"
_COMM_PREFIX = "ncclKernel_"
_RANK_FILE = re.compile(r"rank-(\d+)\.json(\.gz)?")
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def hta_kernel_name(name: str, kind: OpKind) -> str:
    """The name a span gets in a rank file, so that HTA classifies it as the engine did.

    Parameters
    ----------
    name : str
        The span's name as the engine wrote it.
    kind : OpKind
        Its kind; a communication kind (:attr:`OpKind.is_comm`) becomes ``ncclKernel_...``.

    Returns
    -------
    str
        ``name`` for compute; ``"ncclKernel_" + name`` without a leading ``"nccl"`` for
        communication (HTA 0.5.0 matches ``^nccl.*Kernel``, 0.2.0 looks for ``ncclKernel``).

    Examples
    --------
    >>> hta_kernel_name("ncclAllReduce proj-out", OpKind.COLLECTIVE)
    'ncclKernel_AllReduce proj-out'
    >>> hta_kernel_name("nccl tp L3", OpKind.COLLECTIVE)
    'ncclKernel_tp L3'
    >>> hta_kernel_name("fc1", OpKind.GEMM)
    'fc1'
    """
    if not kind.is_comm:
        return name
    if name.startswith(_COMM_PREFIX):
        return name
    rest = name[4:].lstrip(" _") if name.startswith("nccl") else name
    return _COMM_PREFIX + rest


def rank_file_name(rank: int, compress: bool = True) -> str:
    """``rank-N.json.gz`` (or ``rank-N.json``).

    >>> rank_file_name(12)
    'rank-12.json.gz'
    """
    return f"rank-{rank}.json{'.gz' if compress else ''}"


def representative_note(result: SimResult) -> str | None:
    """The run note saying which ranks got a file, when not every rank was simulated."""
    n = len(result.ranks)
    if n >= result.world_size:
        return None
    return (f"per-rank traces (--trace-dir): files for the {n} simulated ranks only, one per pipeline stage "
            f"standing for its {result.world_size // n if n else 0} GPUs; --full writes all {result.world_size}")


def _split(result: SimResult, title: str, metadata: dict | None) -> tuple[dict, dict[int, list[dict]]]:
    """The merged trace's ``otherData`` and its events grouped by pid, made HTA-ready in place."""
    merged = chrome_trace(result, title=title, metadata=metadata)
    by_pid: dict[int, list[dict]] = {info.rank: [] for info in result.ranks}
    corr = dict.fromkeys(by_pid, 0)
    kinds = {k.value: k for k in OpKind}
    for e in merged["traceEvents"]:
        ph = e["ph"]
        if ph == "X":
            args = e["args"]
            e["cat"] = "kernel"
            e["name"] = hta_kernel_name(e["name"], kinds[args["kind"]])
            corr[e["pid"]] += 1
            args["correlation"] = corr[e["pid"]]
        elif ph in ("s", "f", "i"):  # an arrow, or the instant one ends at: its other end is in another file
            continue
        by_pid[e["pid"]].append(e)
    return merged["otherData"], by_pid


def _host_events(rank: int, makespan_s: float) -> list[dict]:
    dur = round(makespan_s * US_PER_S, 3)
    return [{"ph": "M", "name": "thread_name", "pid": rank, "tid": HOST_TID, "args": {"name": "host"}},
            {"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": HOST_TID, "args": {"sort_index": HOST_TID}},
            {"ph": "X", "cat": "user_annotation", "name": _STEP, "pid": rank, "tid": HOST_TID, "ts": 0.0,
             "dur": dur, "args": {"note": "the simulated iteration; the host is not simulated"}}]


def _text(rank: int, world_size: int, other: dict, events: list[dict], host: list[dict]) -> str:
    """One file's JSON: ``distributedInfo`` on its own line (HTA's line-by-line rank regex), one
    event a line; metadata first, then the host thread, then the rank's slices and counters."""
    meta = [e for e in events if e["ph"] == "M"]
    rest = [e for e in events if e["ph"] != "M"]
    return _frame(rank, world_size, _encode(other), ",\n".join(_encode(e) for e in meta + host + rest))


def _frame(rank: int, world_size: int, other: str, body: str) -> str:
    """A rank file's text around its events' (``other``: ``otherData``'s JSON)."""
    info = json.dumps({"backend": "nccl", "rank": rank, "world_size": world_size})  # ": " separators
    return (f'{{"schemaVersion": 1,\n"distributedInfo": {info},\n"displayTimeUnit": "ms",\n'
            f'"otherData": {other},\n"traceEvents": [\n{body}\n]}}\n')


def rank_traces(result: SimResult, *, title: str = "llmsim", metadata: dict | None = None) -> dict[int, str]:
    """The JSON text of every simulated rank's file.

    Parameters
    ----------
    result : SimResult
        A simulated iteration.
    title, metadata
        As for :func:`sim.output.trace.chrome_trace` (stored in ``otherData``).

    Returns
    -------
    dict
        Global rank -> the file's text, for the ranks in ``result.ranks`` (in rank order).

    Raises
    ------
    ValueError
        As :func:`sim.output.trace.chrome_trace` (a span on a rank without a RankInfo, a NaN time).
    """
    return dict(_texts(result, title, metadata))


def _texts(result: SimResult, title: str, metadata: dict | None) -> Iterator[tuple[int, str]]:
    """(rank, text) in rank order, one at a time (``--full`` on 1,024 GPUs makes many): written
    from the merged trace's pieces where :func:`_bulk_texts` takes the result, else parsed from
    the merged trace (:func:`_plain_texts`, the reference); the same text either way."""
    bulk = _bulk_texts(result, title, metadata)
    return bulk if bulk is not None else _plain_texts(result, title, metadata)


def _plain_texts(result: SimResult, title: str, metadata: dict | None) -> Iterator[tuple[int, str]]:
    """:func:`_texts` from the merged trace parsed back into events."""
    other, by_pid = _split(result, title, metadata)
    for rank in sorted(by_pid):
        yield rank, _text(rank, result.world_size, other, by_pid.pop(rank), _host_events(rank, result.makespan_s))


def _bulk_texts(result: SimResult, title: str, metadata: dict | None) -> Iterator[tuple[int, str]] | None:
    """:func:`_texts` from the merged trace's own pieces (:class:`sim.output.trace.Bulk`): each slice
    written as :func:`_split` leaves it (``cat`` ``"kernel"``, :func:`hta_kernel_name`, the
    rank's next ``correlation`` id after its args), the metadata and counters as they are, no
    arrows. None where the merged trace would not be written that way (a time the bulk writer
    does not take, a counter its columns do not, an args value that is a list or mapping:
    parsed and re-encoded compactly it would lose the spaces after its commas)."""
    bulk = Bulk.of(result)
    if bulk is None or not bulk.scalar_args() or counter_columns(result, bulk.ranks) is None:
        return None
    counters = counter_batch(result, bulk.ranks, bulk.enc)
    per_pid = collections.Counter(c.rank for c in result.counters)
    other = _encode({"title": title, **(metadata or {}), "simulator": "llmsim"})
    return _bulk_files(result, bulk, counters, per_pid, other)


def _bulk_files(result: SimResult, bulk: Bulk, counters: list[str], per_pid: collections.Counter,
                other: str) -> Iterator[tuple[int, str]]:
    """Each rank's file, in rank order: its process and thread metadata, the host thread, its
    streams' slices with correlation ids counted across them, then its counters (``counters``:
    every rank's, in rank order, ``per_pid`` of each)."""
    at = 0
    groups_of: dict[int, list[int]] = {}
    for g, (pid, _) in enumerate(bulk.groups):
        groups_of.setdefault(pid, []).append(g)
    for rank in sorted(bulk.ranks):
        events = bulk.process_metadata(rank)
        for g in groups_of.get(rank, ()):
            events += bulk.thread_metadata(*bulk.groups[g])
        events += [_encode(e) for e in _host_events(rank, result.makespan_s)]
        n = 0
        for g in groups_of.get(rank, ()):
            slices = bulk.group(g, (n, hta_kernel_name))
            n += len(slices)
            events += slices
        events += counters[at:at + per_pid[rank]]
        at += per_pid[rank]
        yield rank, _frame(rank, result.world_size, other, ",\n".join(events))


def write_rank_traces(result: SimResult, directory: str | os.PathLike, *, title: str = "llmsim",
                      metadata: dict | None = None, compress: bool = True) -> list[Path]:
    """Write ``rank-N.json.gz`` for every simulated rank into ``directory``.

    Parameters
    ----------
    result : SimResult
        What to write.
    directory : str or os.PathLike
        Created if missing. Rank files of an earlier run there (``rank-N.json[.gz]``) are removed
        first, since HTA would read them as ranks of this one; other files are left alone.
    title, metadata
        As for :func:`sim.output.trace.chrome_trace`.
    compress : bool
        gzip the files (``.json.gz``, the default) or not (``.json``); HTA and Perfetto read both.

    Returns
    -------
    list of Path
        The files written, in rank order.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    texts = _texts(result, title, metadata)
    first = next(texts, None)  # builds every rank's events, so a bad result raises before anything is removed
    for old in sorted(out.iterdir()):
        if _RANK_FILE.fullmatch(old.name) and old.is_file():
            old.unlink()
    paths = []
    for rank, text in itertools.chain([first] if first else [], texts):
        path = out / rank_file_name(rank, compress)
        data = text.encode("utf-8")
        with open(path, "wb") as fh:
            if compress:  # one gzip member, no file name, mtime 0
                gz = GzipParts()
                gz.add_text(data)
                fh.write(gz.finish())
            else:
                fh.write(data)
        paths.append(path)
    return paths

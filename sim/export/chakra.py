"""A simulated iteration as Chakra execution traces: one ``.et`` file per rank, for ASTRA-sim.

Each task of the program becomes a node of its rank's file (``<prefix>.<rank>.et``, the name
ASTRA-sim opens for NPU ``rank``: ``et_filename + "." + to_string(sys->id) + ".et"`` in
``astra-sim/workload/Workload.cc``), with ids in issue order:

* a kernel becomes a ``COMP_NODE`` whose ``duration_micros`` is llmsim's simulated time (ASTRA-sim
  replays it, ``Workload::issue_replay``: "chakra runtimes are in microseconds"), with ``num_ops``
  (FLOPs) and ``tensor_size`` (bytes) for ASTRA-sim's roofline mode (``Workload::issue_comp``) and
  ``is_cpu_op = false`` (the older Chakra feeder defaults it to true,
  ``src/feeder/et_feeder_node.cpp``). ``num_ops`` is at least 1: the roofline prices a node at
  ``num_ops / min(peak, bandwidth * num_ops / tensor_size)``, which is ``tensor_size / bandwidth``
  for a memory-bound kernel of (almost) no FLOPs and ``0 / 0`` for one of none;
* a collective becomes a ``COMM_COLL_NODE`` with ``comm_type`` (the schema's
  ``CollectiveCommType``), ``comm_size`` in bytes and ``pg_name``, the id of its group in the
  communicator-group file written beside the traces (``<prefix>.comm_groups.json``, read by
  ``--comm-group-configuration``; ``Workload::initialize_comm_groups``). ``comm_size`` follows
  ASTRA-sim, which differs from nccl-tests (llmsim's ``size_bytes``) for one collective: an
  all-gather's size is each rank's input, since its ring phase sends ``msg_size = data_size`` and
  ends with ``final_data_size = data_size * nodes_in_ring`` (``astra-sim/system/collective/Ring.cc``);
* a pipeline send or receive becomes a ``COMM_SEND_NODE`` / ``COMM_RECV_NODE`` with ``comm_src``,
  ``comm_dst``, ``comm_size`` and ``comm_tag`` (``Workload::issue_send_comm`` /
  ``issue_recv_comm``); a transfer's tag is its sender's count of earlier transfers to the same
  receiver, and the receive carries the tag of the send it is paired with;
* a ring exchange of context parallelism (send to the next rank of the ring, receive from the
  previous) becomes a send node and a receive node, with the task's dependencies on both.

A task's dependencies are the node's ``data_deps``; the task before it on its stream (CUDA
streams run in order) is its ``ctrl_deps``. ASTRA-sim's feeder resolves both
(``RESOLVE_DATA_DEPS`` / ``RESOLVE_CTRL_DEPS`` in ``astra-sim/workload/feeder_v3/common.h``).
Attributes use the value types Chakra's own converters write and its feeders read
(``comm_type``, ``comm_size``, ``num_ops`` as ``int64``, ``tensor_size`` as ``uint64``, ``comm_src``,
``comm_dst``, ``comm_tag`` as ``int32``, ``pg_name`` as a string, ``is_cpu_op`` as a bool;
``src/converter/text_converter.py``, ``src/feeder/et_feeder_node.cpp``). llmsim adds ``stream``
(the :class:`~sim.types.Stream` value, as Chakra's PyTorch converter adds the CUDA stream),
``op_kind`` or ``comm_class`` and the task's arguments (``phase``, ``microbatch``, ``chunk``,
``layer``).

Times are each node's simulated interval on the microsecond grid: ``start_time_micros`` is its
start rounded, ``duration_micros`` its rounded end minus its rounded start, so each node is within
a microsecond of its simulated time and back-to-back nodes on a stream add up exactly. A
communication node's interval is its transfer (from when every member had arrived).

Every rank gets a file. Under ``--full`` each is its own simulated program; with one
representative rank per pipeline stage (the default) the other ranks' files are the stage
representative's, with each group and peer moved to the rank's own by rank substitution
(:func:`substitution`): a TP or DP peer runs the same program over its own groups. The files
equal those of a ``--full`` run (tested), and cost one simulation per stage.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tempfile
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from sim.errors import ConfigError, NotBuiltError
from sim.export.etfile import (
    Attr,
    AttrType,
    CollectiveCommType,
    EtNode,
    NodeType,
    encode_metadata,
    encode_node,
    encode_node_attrs,
    frame,
)
from sim.program import Block, Program, Task
from sim.results import SimResult
from sim.types import CollectiveKind
from sim.units import MB, US
from sim.version import __version__
from sim.workload.layout import Layout
from sim.workload.ops import CommOp

__all__ = ["PREFIX", "SCHEMA_VERSION", "ChakraExport", "ChakraExporter", "export_chakra", "substitution",
           "comm_size_bytes"]

PREFIX = "llmsim"
"""File prefix: ``<prefix>.<rank>.et`` and ``<prefix>.comm_groups.json``."""

SCHEMA_VERSION = "0.0.4"
"""``GlobalMetadata.version``, as mlcommons/chakra's ``src/generator/generator.py`` writes it."""

_COMM_TYPE = {
    CollectiveKind.ALL_REDUCE: CollectiveCommType.ALL_REDUCE,
    CollectiveKind.ALL_GATHER: CollectiveCommType.ALL_GATHER,
    CollectiveKind.REDUCE_SCATTER: CollectiveCommType.REDUCE_SCATTER,
    CollectiveKind.ALL_TO_ALL: CollectiveCommType.ALL_TO_ALL,
}


def comm_size_bytes(collective: CollectiveKind, size_bytes: float, group_size: int) -> int:
    """ASTRA-sim's ``comm_size`` of a collective llmsim sizes as nccl-tests does.

    >>> comm_size_bytes(CollectiveKind.ALL_GATHER, 8e6, 8), comm_size_bytes(CollectiveKind.ALL_REDUCE, 8e6, 8)
    (1000000, 8000000)
    """
    if collective is CollectiveKind.ALL_GATHER:
        return round(size_bytes / group_size)
    return round(size_bytes)


def substitution(layout: Layout, rank: int) -> Callable[[int], int]:
    """The rank map that carries stage ``pp``'s representative (tp = dp = 0) onto ``rank``.

    Each coordinate digit of a rank (tp; and within dp: cp, ep and the rest of dp, as
    :class:`~sim.workload.layout.Layout` nests them) is shifted by ``rank``'s, modulo its size;
    pp is kept. The shift is a bijection that sends every TP, CP, EP, expert-data-parallel and
    data-parallel group of the representative onto the same kind of group of ``rank``, and its
    pipeline peers onto ``rank``'s.

    >>> f = substitution(Layout(2, 2, 2), 7)      # rank 7 = (tp 1, dp 1, pp 1)
    >>> [f(r) for r in (4, 5, 6, 0)]              # its stage's ranks, and a peer in stage 0
    [7, 6, 5, 3]
    """
    t_r, d_r, _ = layout.coords(rank)
    cp, ep = layout.cp, layout.ep
    rest = layout.dp // (cp * ep)
    c_r, e_r, b_r = d_r % cp, (d_r // cp) % ep, d_r // (cp * ep)

    def shift(x: int) -> int:
        t, d, p = layout.coords(x)
        c, e, b = d % cp, (d // cp) % ep, d // (cp * ep)
        d2 = (c + c_r) % cp + cp * ((e + e_r) % ep + ep * ((b + b_r) % rest))
        return layout.rank((t + t_r) % layout.tp, d2, p)

    return shift


@dataclass(frozen=True, slots=True)
class _Comm:
    """What a comm node needs from its rank: a group (collective) or a peer (send, receive)."""

    group: tuple[int, ...] = ()
    src: int = -1
    dst: int = -1


@dataclass(frozen=True)
class ChakraExport:
    """What :meth:`ChakraExporter.write` wrote."""

    directory: Path
    prefix: str
    files: tuple[Path, ...]
    comm_groups_path: Path
    nodes_per_rank: tuple[int, ...]
    total_bytes: int
    comm_groups: int
    synthesized_ranks: int
    """Ranks whose file was made from their stage representative's program (0 under --full)."""

    def summary(self) -> str:
        n = len(self.files)
        how = (f"{self.synthesized_ranks} by rank substitution from their stage's representative"
               if self.synthesized_ranks else "each from its own simulated program")
        return (f"chakra: {n} execution traces ({sum(self.nodes_per_rank):,} nodes, {self.total_bytes / MB:,.1f} MB; "
                f"{how}) in {self.directory}/{self.prefix}.<rank>.et, {self.comm_groups} communicator groups in "
                f"{self.comm_groups_path.name}")


class ChakraExporter:
    """Per-rank Chakra nodes of a finished simulation (op granularity).

    Parameters
    ----------
    program, result : Program, SimResult
        A simulation's program and what the engine recorded for it (``run.program``,
        ``run.result``).
    layout : Layout
        The job's rank layout (``Layout.of(run.workload.parallel)``), for rank substitution.
    metadata : dict, optional
        Extra ``GlobalMetadata`` string attributes (workload and topology names).

    Raises
    ------
    NotBuiltError
        For a program at layer granularity, whose blocks hide the order of their ops.
    """

    def __init__(self, program: Program, result: SimResult, layout: Layout,
                 metadata: dict[str, str] | None = None) -> None:
        if any(type(t.op) is Block for t in program.tasks):
            raise NotBuiltError("--chakra needs --granularity op: a layer block is timed as one task, so the "
                                "order and times of its kernels and collectives are not known")
        self.program, self.layout = program, layout
        self.metadata = dict(metadata or {})
        self.makespan_s = result.makespan_s
        self.world_size = program.world_size
        self._by_rank: dict[int, list[Task]] = defaultdict(list)
        for t in program.tasks:
            self._by_rank[t.rank].append(t)
        self._spans = self._task_spans(program, result)
        self._tags, self._ring_recv_tags = self._p2p_tags()
        self._template_of: tuple[int, list] = (-1, [])
        """The last template built (the files are written stage by stage)."""
        self.groups = self._group_ids()

    # -- which program each rank runs ---------------------------------------------------
    def source(self, rank: int) -> int:
        """The simulated rank whose program ``rank`` runs: itself, or its stage's representative."""
        if rank in self._by_rank:
            return rank
        return self.layout.rank(0, 0, self.layout.coords(rank)[2])

    def _map(self, rank: int) -> Callable[[int], int]:
        src = self.source(rank)
        return (lambda x: x) if src == rank else substitution(self.layout, rank)

    # -- pass 1: spans, tags, groups ----------------------------------------------------
    @staticmethod
    def _task_spans(program: Program, result: SimResult) -> list:
        """Each task's span (the engine writes one per task, in task order, at op granularity)."""
        spans = result.spans
        assert len(spans) == len(program.tasks), (len(spans), len(program.tasks))
        assert all(t.rank == s.rank and t.stream == s.stream for t, s in zip(program.tasks, spans))
        return spans

    def _p2p_tags(self) -> tuple[dict[int, int], dict[int, int]]:
        """Task id -> tag of every send, and of every receive: the sender's count of its
        earlier sends to the same receiver; a pipeline receive takes its send's (joined by
        ``coll_key``), a ring exchange's receive counts the ring receives from the same sender
        (every member of a ring runs the same exchanges in the same order)."""
        tags: dict[int, int] = {}
        ring_recv: dict[int, int] = {}
        sent: dict[tuple[int, int], int] = defaultdict(int)
        recvd: dict[tuple[int, int], int] = defaultdict(int)
        send_of: dict[int, int] = {}
        for rank in sorted(self._by_rank):
            for t in self._by_rank[rank]:
                op = t.op
                if not t.comm:
                    continue
                if op.collective is CollectiveKind.SEND_RECV and op.group[0] == rank:
                    tags[t.id] = sent[op.group]
                    sent[op.group] += 1
                    send_of[t.coll_key] = t.id
                elif op.collective is CollectiveKind.RING_EXCHANGE:
                    nxt, prev = _ring_peers(op.group, rank)
                    tags[t.id] = sent[(rank, nxt)]
                    sent[(rank, nxt)] += 1
                    ring_recv[t.id] = recvd[(prev, rank)]
                    recvd[(prev, rank)] += 1
        for t in self.program.tasks:
            if t.comm and t.op.collective is CollectiveKind.SEND_RECV and t.op.group[1] == t.rank:
                tags[t.id] = tags[send_of[t.coll_key]]
        return tags, ring_recv

    def _group_ids(self) -> dict[tuple[int, ...], int]:
        """Every rank's collective groups (sorted ranks) -> id 1, 2, ... in (size, ranks) order
        (ASTRA-sim takes an empty ``pg_name`` or ``"0"`` as every rank, so ids start at 1)."""
        used = {r: {t.op.group for t in ts if t.comm and t.op.collective in _COMM_TYPE}
                for r, ts in self._by_rank.items()}
        groups: set[tuple[int, ...]] = set()
        for rank in range(self.world_size):
            shift = self._map(rank)
            groups.update(tuple(sorted(shift(x) for x in g)) for g in used[self.source(rank)])
        return {g: i + 1 for i, g in enumerate(sorted(groups, key=lambda g: (len(g), g)))}

    # -- pass 2: nodes ------------------------------------------------------------------
    def _template(self, rank: int) -> list[tuple[EtNode, _Comm | None]]:
        """The nodes of simulated ``rank`` without their rank-dependent attributes (``pg_name``,
        ``comm_src``, ``comm_dst``), each with what fills them in."""
        if self._template_of[0] == rank:
            return self._template_of[1]
        out: list[tuple[EtNode, _Comm | None]] = []
        ids: dict[int, tuple[int, ...]] = {}
        last: dict = {}
        spans = self._spans
        head_of: dict[tuple, tuple[Attr, ...]] = {}
        tail_of: dict[tuple, tuple[Attr, ...]] = {}
        for t in self._by_rank[rank]:
            data = tuple(sorted({i for d in t.deps for i in ids[d]}))
            ctrl = ids[last[t.stream]] if t.stream in last else ()
            span = spans[t.id]
            start = span.transfer_start_s if t.comm and span.transfer_start_s is not None else span.start_s
            start_us = round(start / US)
            times = (start_us, round(span.end_s / US) - start_us)
            tail = tail_of.get((t.stream, t.args))
            if tail is None:
                tail = tail_of[(t.stream, t.args)] = ((Attr("stream", AttrType.INT64, int(t.stream)),)
                                                      + _arg_attrs(t.args))
            head = head_of.get((id(t.op), t.kind))
            if head is None:
                head = head_of[(id(t.op), t.kind)] = _op_attrs(t.op, t.kind)
            op = t.op
            first = len(out)
            if not t.comm:
                out.append((EtNode(first, t.name, NodeType.COMP_NODE, data, ctrl, *times, head + tail), None))
            elif op.collective in _COMM_TYPE:
                out.append((EtNode(first, t.name, NodeType.COMM_COLL_NODE, data, ctrl, *times, head + tail),
                            _Comm(group=op.group)))
            elif op.collective is CollectiveKind.SEND_RECV:
                kind = NodeType.COMM_SEND_NODE if op.group[0] == rank else NodeType.COMM_RECV_NODE
                attrs = head + (Attr("comm_tag", AttrType.INT32, self._tags[t.id]),) + tail
                out.append((EtNode(first, t.name, kind, data, ctrl, *times, attrs),
                            _Comm(src=op.group[0], dst=op.group[1])))
            else:  # ring exchange: send to the next rank of the ring, receive from the previous
                nxt, prev = _ring_peers(op.group, rank)
                for i, (kind, src, dst, tag) in enumerate(((NodeType.COMM_SEND_NODE, rank, nxt, self._tags[t.id]),
                                                           (NodeType.COMM_RECV_NODE, prev, rank,
                                                            self._ring_recv_tags[t.id]))):
                    attrs = head + (Attr("comm_tag", AttrType.INT32, tag),) + tail
                    out.append((EtNode(first + i, t.name, kind, data, ctrl, *times, attrs), _Comm(src=src, dst=dst)))
            ids[t.id] = tuple(range(first, len(out)))
            last[t.stream] = t.id
        self._template_of = (rank, out)
        return out

    def _added(self, rank: int) -> Callable[[_Comm], tuple[Attr, ...]]:
        """For ``rank``: a comm node's template -> its attributes that depend on the rank."""
        shift = self._map(rank)
        memo: dict[_Comm, tuple[Attr, ...]] = {}

        def added(comm: _Comm) -> tuple[Attr, ...]:
            add = memo.get(comm)
            if add is None:
                if comm.group:
                    gid = self.groups[tuple(sorted(shift(x) for x in comm.group))]
                    add = (Attr("pg_name", AttrType.STRING, str(gid)),)
                else:
                    add = (Attr("comm_src", AttrType.INT32, shift(comm.src)),
                           Attr("comm_dst", AttrType.INT32, shift(comm.dst)))
                memo[comm] = add
            return add

        return added

    def nodes(self, rank: int) -> list[EtNode]:
        """The nodes of ``rank``'s file, in id order."""
        added = self._added(rank)
        return [n if c is None else replace(n, attrs=n.attrs + added(c)) for n, c in self._template(self.source(rank))]

    def metadata_attrs(self, rank: int) -> tuple[Attr, ...]:
        """``GlobalMetadata`` attributes of ``rank``'s file."""
        attrs = [Attr("producer", AttrType.STRING, f"llmsim {__version__}"),
                 Attr("rank", AttrType.INT64, rank),
                 Attr("world_size", AttrType.INT64, self.world_size),
                 Attr("simulated_rank", AttrType.INT64, self.source(rank)),
                 Attr("makespan_s", AttrType.DOUBLE, self.makespan_s)]
        attrs += [Attr(k, AttrType.STRING, v) for k, v in sorted(self.metadata.items())]
        return tuple(attrs)

    def comm_groups_json(self) -> dict[str, list[int]]:
        """The communicator-group file: ``{"<id>": [ranks...]}`` (``Workload::initialize_comm_groups``)."""
        return {str(i): list(g) for g, i in sorted(self.groups.items(), key=lambda kv: kv[1])}

    def write(self, directory: str | Path, prefix: str = PREFIX) -> ChakraExport:
        """Write ``<prefix>.<rank>.et`` for every rank and ``<prefix>.comm_groups.json`` into
        ``directory`` (created if missing). Equal inputs give equal bytes.

        The files are written into a temporary folder inside ``directory`` and moved into
        place together once all are written, with Ctrl-C held off while they move, and the
        ``<prefix>.*`` files of an earlier run that this one does not write (more ranks) are
        removed in the same step: the folder holds one run's files, never a mix, even when the
        export is interrupted (the temporary folder is removed; a process killed outright
        leaves it, named ``.<prefix>.partial-*``)."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{prefix}.partial-", dir=out))
        try:
            written = self._write_files(tmp, prefix)
            with _sigint_held():
                _replace_run(tmp, out, prefix)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        files = tuple(out / p.name for p in written.files)
        return replace(written, directory=out, files=files, comm_groups_path=out / written.comm_groups_path.name)

    def _write_files(self, out: Path, prefix: str) -> ChakraExport:
        """:meth:`write`'s files, written into the existing folder ``out``."""
        files, counts, total = [], [], 0
        src_of = -1
        for rank in range(self.world_size):
            src, added = self.source(rank), self._added(rank)
            if src != src_of:  # the source rank's program, encoded once for the ranks that run it
                src_of, template = src, self._template(src)
                blobs_of = [frame(encode_node(n)) if c is None else None for n, c in template]
                comm_at = [(i, encode_node(n), c) for i, (n, c) in enumerate(template) if c is not None]
                extra_of: dict[tuple, bytes] = {}  # a rank's attributes -> their encoding
                framed: dict[tuple, bytes] = {}  # (node, its rank's attributes) -> the framed node
            blobs = blobs_of.copy()
            for i, base, c in comm_at:
                add = added(c)
                b = framed.get((i, add))
                if b is None:
                    extra = extra_of.get(add)
                    if extra is None:
                        extra = extra_of[add] = encode_node_attrs(add)
                    b = framed[(i, add)] = frame(base + extra)
                blobs[i] = b
            path = out / f"{prefix}.{rank}.et"
            data = frame(encode_metadata(SCHEMA_VERSION, self.metadata_attrs(rank))) + b"".join(blobs)
            path.write_bytes(data)
            total += len(data)
            files.append(path)
            counts.append(len(blobs))
        groups_path = out / f"{prefix}.comm_groups.json"
        groups_path.write_text("{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}"
                                                   for k, v in self.comm_groups_json().items()) + "\n}\n")
        synthesized = sum(1 for r in range(self.world_size) if self.source(r) != r)
        return ChakraExport(out, prefix, tuple(files), groups_path, tuple(counts), total, len(self.groups), synthesized)


@contextmanager
def _sigint_held() -> Iterator[None]:
    """Hold off SIGINT (Ctrl-C) in the block, where the main thread can: a Ctrl-C that arrives
    meanwhile is delivered when it ends."""
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    mask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        mask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _replace_run(new: Path, out: Path, prefix: str) -> None:
    """Move the files of ``new`` into ``out``, removing first the ``<prefix>.<rank>.et`` and
    ``<prefix>.comm_groups.json`` files of ``out`` that ``new`` does not replace."""
    names = {p.name for p in new.iterdir()}
    own = re.compile(rf"{re.escape(prefix)}\.(\d+\.et|comm_groups\.json)")
    for old in out.iterdir():
        if old.name not in names and own.fullmatch(old.name) and old.is_file():
            old.unlink()
    for name in sorted(names):
        os.replace(new / name, out / name)


def _op_attrs(op, kind) -> tuple[Attr, ...]:
    """The attributes of a node that follow from its op alone (shared by every layer and
    micro-batch that runs the op)."""
    if not isinstance(op, CommOp):
        return (_GPU, Attr("num_ops", AttrType.INT64, max(1, round(op.flops))),
                Attr("tensor_size", AttrType.UINT64, round(op.bytes)), Attr("op_kind", AttrType.STRING, kind.value))
    cls = Attr("comm_class", AttrType.STRING, op.comm_class.value)
    if op.collective in _COMM_TYPE:
        return (_GPU, Attr("comm_type", AttrType.INT64, int(_COMM_TYPE[op.collective])),
                Attr("comm_size", AttrType.INT64, comm_size_bytes(op.collective, op.size_bytes, len(op.group))), cls)
    return (_GPU, Attr("comm_size", AttrType.INT64, round(op.size_bytes)), cls)


_GPU = Attr("is_cpu_op", AttrType.BOOL, False)


def _ring_peers(group: tuple[int, ...], rank: int) -> tuple[int, int]:
    """(next, previous) of ``rank`` in a ring ``group``."""
    i = group.index(rank)
    return group[(i + 1) % len(group)], group[i - 1]


def _arg_attrs(args: tuple) -> tuple[Attr, ...]:
    out = []
    for k, v in args:
        if isinstance(v, bool):
            out.append(Attr(k, AttrType.BOOL, v))
        elif isinstance(v, int):
            out.append(Attr(k, AttrType.INT64, v))
        elif isinstance(v, float):
            out.append(Attr(k, AttrType.DOUBLE, v))
        else:
            out.append(Attr(k, AttrType.STRING, str(v)))
    return tuple(out)


def export_chakra(run, directory: str | Path, prefix: str = PREFIX) -> ChakraExport:
    """Write ``run``'s Chakra execution traces, one per rank, and its communicator groups.

    >>> import tempfile
    >>> from sim.config import load_workload, load_topology
    >>> from sim.runner import simulate
    >>> run = simulate(load_workload("tiny"), load_topology("dgx-a100"))
    >>> with tempfile.TemporaryDirectory() as d:
    ...     exp = export_chakra(run, d)
    >>> len(exp.files), exp.synthesized_ranks
    (8, 6)
    """
    layout = Layout.of(run.workload.parallel)
    if layout.folded and run.program.representative:
        raise ConfigError("<--chakra>", "parallel.etp", "the attention's TP degree, or --full: the files of "
                          "unsimulated ranks are made by shifting rank coordinates, which is not built for "
                          "expert groups folded across TP (MoE parallel folding)", layout.etp)
    if layout.dp_replicate > 1 and run.program.representative:
        raise ConfigError("<--chakra>", "parallel.dp_shard", "null, or --full: the files of unsimulated ranks are "
                          "made by shifting rank coordinates, which does not keep hybrid sharding's shard groups "
                          "(blocks of consecutive data-parallel ranks)", run.workload.parallel.dp_shard)
    exporter = ChakraExporter(run.program, run.result, layout,
                              {"workload": run.workload.name, "topology": run.topology.name})
    return exporter.write(directory, prefix)

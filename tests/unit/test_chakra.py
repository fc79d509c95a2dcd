"""Chakra execution-trace export: the files decode through the schema to what the program says,
and every rank's file fits the others' (collectives on all members, sends with receives)."""

from __future__ import annotations

import heapq
import json
from collections import Counter, defaultdict

import pytest

pb = pytest.importorskip("sim.export.et_def_pb2", reason="Chakra export needs protobuf (the chakra extra)")

from sim.cli import main  # noqa: E402
from sim.config import load_topology, load_workload  # noqa: E402
from sim.errors import NotBuiltError  # noqa: E402
from sim.export.chakra import ChakraExporter, comm_size_bytes, export_chakra, substitution  # noqa: E402
from sim.export.etfile import CollectiveCommType, EtNode, NodeType, frame, read_et, write_et  # noqa: E402
from sim.runner import simulate  # noqa: E402
from sim.types import CollectiveKind, ScheduleKind  # noqa: E402
from sim.units import US  # noqa: E402
from sim.workload.layout import Layout  # noqa: E402
from tests.conftest import make_workload  # noqa: E402

_TYPES = {CollectiveKind.ALL_REDUCE: CollectiveCommType.ALL_REDUCE,
          CollectiveKind.ALL_GATHER: CollectiveCommType.ALL_GATHER,
          CollectiveKind.REDUCE_SCATTER: CollectiveCommType.REDUCE_SCATTER,
          CollectiveKind.ALL_TO_ALL: CollectiveCommType.ALL_TO_ALL}


def _run(workload, full=False, granularity="op"):
    return simulate(workload, load_topology("dgx-a100"), full=full, granularity=granularity)


def _exporter(run) -> ChakraExporter:
    return ChakraExporter(run.program, run.result, Layout.of(run.workload.parallel))


@pytest.fixture(scope="module")
def tiny_run():
    return _run(load_workload("tiny"))


@pytest.fixture(scope="module")
def tiny_files(tiny_run, tmp_path_factory):
    d = tmp_path_factory.mktemp("chakra")
    exp = export_chakra(tiny_run, d)
    groups = {int(k): tuple(v) for k, v in json.loads(exp.comm_groups_path.read_text()).items()}
    return exp, {r: read_et(p) for r, p in enumerate(exp.files)}, groups


# A workload with every kind of communication the exporter maps: TP, DP (distributed optimizer),
# pipeline sends over an interleaved schedule with a tied embedding, CP ring exchanges and
# EP all-to-alls.
_MIXED = dict(tp=2, pp=2, dp=2, cp=2, ep=2, experts=4, topk=2, layers=4, vps=2,
              schedule=ScheduleKind.INTERLEAVED, tied=True, sp=True, dist_opt=True, seq=1024, gbs=8)


@pytest.fixture(scope="module")
def mixed_runs():
    w = make_workload(**_MIXED)
    return _run(w), _run(w, full=True)


def _attr(node: EtNode, name: str):
    return node.attr(name)


def test_files_round_trip_through_the_schema(tiny_files, tiny_run):
    exp, traces, _ = tiny_files
    ex = _exporter(tiny_run)
    assert [p.name for p in exp.files] == [f"llmsim.{r}.et" for r in range(8)]
    for r, tr in traces.items():
        assert tr.nodes == ex.nodes(r)
        meta = {a.name: a.value for a in tr.metadata}
        assert (meta["rank"], meta["world_size"], meta["workload"]) == (r, 8, "tiny")
        assert meta["simulated_rank"] == (0 if r < 4 else 4)
    assert exp.nodes_per_rank == tuple(len(tr.nodes) for tr in traces.values())
    assert exp.total_bytes == sum(p.stat().st_size for p in exp.files)


def test_raw_messages_have_the_feeder_value_types(tiny_files):
    """Decoded with the generated classes alone (protolib's framing: varint length, message):
    the attributes ASTRA-sim and Chakra's feeders read have the oneof member they read."""
    exp, _, _ = tiny_files
    data = exp.files[0].read_bytes()
    pos, msgs = 0, []
    while pos < len(data):
        size = shift = 0
        while True:
            b = data[pos]
            pos += 1
            size |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        msgs.append(data[pos:pos + size])
        pos += size
    assert pb.GlobalMetadata.FromString(msgs[0]).version == "0.0.4"
    want = {"is_cpu_op": "bool_val", "num_ops": "int64_val", "tensor_size": "uint64_val", "comm_type": "int64_val",
            "comm_size": "int64_val", "pg_name": "string_val", "comm_src": "int32_val", "comm_dst": "int32_val",
            "comm_tag": "int32_val"}
    seen = Counter()
    for raw in msgs[1:]:
        node = pb.Node.FromString(raw)
        for a in node.attr:
            if a.name in want:
                assert a.WhichOneof("value") == want[a.name], (node.name, a.name)
                seen[a.name] += 1
        if node.type == pb.COMP_NODE:
            assert not next(a.bool_val for a in node.attr if a.name == "is_cpu_op")
    assert set(seen) == set(want)


def test_every_task_is_a_node_with_its_deps_and_times(tiny_run):
    ex = _exporter(tiny_run)
    prog, spans = tiny_run.program, tiny_run.result.spans
    for rank in (0, 4):
        tasks = [t for t in prog.tasks if t.rank == rank]
        nodes = ex.nodes(rank)
        assert len(nodes) == len(tasks)  # no ring exchange here: one node per task
        node_of = {t.id: i for i, t in enumerate(tasks)}
        prev: dict = {}
        for t in tasks:
            n = nodes[node_of[t.id]]
            assert n.name == t.name
            assert n.data_deps == tuple(sorted(node_of[d] for d in t.deps))
            assert n.ctrl_deps == ((node_of[prev[t.stream]],) if t.stream in prev else ())
            assert _attr(n, "stream") == int(t.stream)
            prev[t.stream] = t.id
            span = spans[t.id]
            start = span.start_s if span.transfer_start_s is None else span.transfer_start_s
            assert abs(n.duration_micros * US - (span.end_s - start)) <= 1 * US
            assert abs(n.start_time_micros * US - start) <= 0.5 * US
            if t.comm:
                op = t.op
                if op.collective is not CollectiveKind.SEND_RECV:
                    assert n.type is NodeType.COMM_COLL_NODE
                else:
                    assert n.type is (NodeType.COMM_SEND_NODE if op.group[0] == rank else NodeType.COMM_RECV_NODE)
            else:
                assert n.type is NodeType.COMP_NODE
                assert _attr(n, "num_ops") == max(1, round(t.op.flops))
                assert _attr(n, "tensor_size") == round(t.op.bytes)
                assert _attr(n, "op_kind") == t.kind.value


def test_compute_time_adds_up_to_the_simulated_spans(tiny_run):
    """Back-to-back kernels on the compute stream telescope on the microsecond grid."""
    ex = _exporter(tiny_run)
    prog, spans = tiny_run.program, tiny_run.result.spans
    for rank in (0, 4):
        comp = [t for t in prog.tasks if t.rank == rank and not t.comm]
        exact = sum(spans[t.id].end_s - spans[t.id].start_s for t in comp)
        micros = sum(n.duration_micros for n in ex.nodes(rank) if n.type is NodeType.COMP_NODE)
        gaps = sum(1 for a, b in zip(comp, comp[1:]) if spans[b.id].start_s > spans[a.id].end_s)
        assert abs(micros * US - exact) <= (gaps + 1) * US


def test_comm_nodes_carry_type_size_and_group(tiny_files, tiny_run):
    _, traces, groups = tiny_files
    prog = tiny_run.program
    for rank in (0, 4):
        tasks = [t for t in prog.tasks if t.rank == rank]
        for t, n in zip(tasks, traces[rank].nodes):
            if not t.comm:
                continue
            op = t.op
            if op.collective in _TYPES:
                assert n.type is NodeType.COMM_COLL_NODE
                assert _attr(n, "comm_type") == _TYPES[op.collective]
                assert groups[int(_attr(n, "pg_name"))] == tuple(sorted(op.group))
                gather = op.collective is CollectiveKind.ALL_GATHER
                expected = op.size_bytes / len(op.group) if gather else op.size_bytes
                assert _attr(n, "comm_size") == round(expected)
            else:
                assert (_attr(n, "comm_src"), _attr(n, "comm_dst")) == op.group
                assert _attr(n, "comm_size") == round(op.size_bytes)


def test_comm_size_follows_astra_sim_for_all_gather_only():
    assert comm_size_bytes(CollectiveKind.ALL_GATHER, 64.0, 8) == 8
    for kind in (CollectiveKind.ALL_REDUCE, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_TO_ALL):
        assert comm_size_bytes(kind, 64.0, 8) == 64


def _check_files(nodes_by_rank: dict[int, list[EtNode]], groups: dict[int, tuple[int, ...]]) -> None:
    """Ids 0..n-1, deps backwards; the k-th collective of a group is the same on every member;
    every send has one receive with its source, destination, tag and size."""
    colls: dict[tuple[int, int], list] = defaultdict(list)
    sends, recvs = Counter(), Counter()
    for rank, nodes in nodes_by_rank.items():
        assert [n.id for n in nodes] == list(range(len(nodes)))
        count: Counter = Counter()
        for n in nodes:
            assert all(d < n.id for d in n.data_deps + n.ctrl_deps), n
            if n.type is NodeType.COMM_COLL_NODE:
                g = int(_attr(n, "pg_name"))
                assert rank in groups[g]
                colls[(g, count[g])].append((rank, _attr(n, "comm_type"), _attr(n, "comm_size"), n.name))
                count[g] += 1
            elif n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
                src, dst = _attr(n, "comm_src"), _attr(n, "comm_dst")
                assert rank == (src if n.type is NodeType.COMM_SEND_NODE else dst)
                key = (src, dst, _attr(n, "comm_tag"), _attr(n, "comm_size"))
                (sends if n.type is NodeType.COMM_SEND_NODE else recvs)[key] += 1
    assert colls
    for (g, _), members in colls.items():
        assert sorted(m[0] for m in members) == list(groups[g])
        assert len({m[1:] for m in members}) == 1, members
    assert sends == recvs and max(sends.values()) == 1


def test_tiny_files_fit_together(tiny_files):
    _, traces, groups = tiny_files
    _check_files({r: tr.nodes for r, tr in traces.items()}, groups)


def test_mixed_parallelism_files_fit_together(mixed_runs):
    ex = _exporter(mixed_runs[0])
    nodes = {r: ex.nodes(r) for r in range(ex.world_size)}
    kinds = Counter(n.type for ns in nodes.values() for n in ns)
    assert kinds[NodeType.COMM_SEND_NODE] and kinds[NodeType.COMM_COLL_NODE]
    comm_types = {n.attr("comm_type") for ns in nodes.values() for n in ns if n.type is NodeType.COMM_COLL_NODE}
    assert comm_types == {CollectiveCommType.ALL_REDUCE, CollectiveCommType.ALL_GATHER,
                          CollectiveCommType.REDUCE_SCATTER, CollectiveCommType.ALL_TO_ALL}
    p2p_classes = {n.attr("comm_class") for ns in nodes.values() for n in ns if n.type is NodeType.COMM_RECV_NODE}
    assert p2p_classes == {"pp", "cp"}  # pipeline transfers and ring-exchange halves
    _check_files(nodes, {gid: ranks for ranks, gid in ex.groups.items()})


@pytest.mark.parametrize("which", ["tiny", "mixed"])
def test_substituted_ranks_equal_a_full_simulation(which, tiny_run, mixed_runs):
    """Every rank's file from its stage representative (rank substitution) equals the file of
    a simulation of every rank."""
    if which == "tiny":
        rep, full = tiny_run, _run(load_workload("tiny"), full=True)
    else:
        rep, full = mixed_runs
    a, b = _exporter(rep), _exporter(full)
    assert rep.program.representative and not full.program.representative
    assert a.groups == b.groups
    for r in range(a.world_size):
        assert a.nodes(r) == b.nodes(r), r
    assert sum(1 for r in range(a.world_size) if a.source(r) != r) == a.world_size - rep.workload.parallel.pp


def test_substitution_maps_groups_onto_groups():
    lay = Layout(2, 8, 2, cp=2, ep=2)
    for rank in range(lay.world_size):
        f = substitution(lay, rank)
        assert sorted(f(x) for x in range(lay.world_size)) == list(range(lay.world_size))
        t, d, p = lay.coords(rank)
        assert f(lay.rank(0, 0, p)) == rank
        assert sorted(map(f, lay.tp_group(0, p))) == sorted(lay.tp_group(d, p))
        assert sorted(map(f, lay.dp_group(0, p))) == sorted(lay.dp_group(t, p))
        assert sorted(map(f, lay.cp_group(0, 0, p))) == sorted(lay.cp_group(t, d, p))
        assert sorted(map(f, lay.ep_group(0, 0, p))) == sorted(lay.ep_group(t, d, p))
        assert sorted(map(f, lay.edp_group(0, 0, p))) == sorted(lay.edp_group(t, d, p))
        assert f(lay.rank(0, 0, 1 - p)) == lay.rank(t, d, 1 - p)


def _replay_us(nodes_by_rank: dict[int, list[EtNode]]) -> int:
    """Replay every rank's file with its durations and a free network: a node starts when its
    data and control parents are done; a collective ends when all members of its group have
    started their k-th collective on it, a transfer when both ends have. Returns the makespan in
    microseconds; fails on a deadlock."""
    done: dict[tuple[int, int], int] = {}
    waiting = {(r, n.id): len(set(n.data_deps + n.ctrl_deps)) for r, ns in nodes_by_rank.items() for n in ns}
    children = defaultdict(list)
    meet, arrived = {}, defaultdict(list)
    for r, ns in nodes_by_rank.items():
        count: Counter = Counter()
        for n in ns:
            for d in set(n.data_deps + n.ctrl_deps):
                children[(r, d)].append((r, n.id))
            if n.type is NodeType.COMM_COLL_NODE:
                g = n.attr("pg_name")
                meet[(r, n.id)] = ("coll", g, count[g])
                count[g] += 1
            elif n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
                meet[(r, n.id)] = ("p2p", n.attr("comm_src"), n.attr("comm_dst"), n.attr("comm_tag"))
    size = Counter(meet.values())
    ready = [(0, k) for k, w in waiting.items() if w == 0]
    heapq.heapify(ready)
    start: dict = {}
    while ready:
        t, key = heapq.heappop(ready)
        r, i = key
        node = nodes_by_rank[r][i]
        if key in meet:
            m = meet[key]
            arrived[m].append((t, key))
            if len(arrived[m]) < size[m]:
                continue
            end = max(a[0] for a in arrived[m])
            finished = [a[1] for a in arrived[m]]
        else:
            end, finished = t + node.duration_micros, [key]
        for k in finished:
            done[k] = end
            for c in children[k]:
                start[c] = max(start.get(c, 0), end)
                waiting[c] -= 1
                if waiting[c] == 0:
                    heapq.heappush(ready, (start[c], c))
    stuck = [k for k in waiting if k not in done]
    assert not stuck, f"{len(stuck)} nodes never ran, first {stuck[:3]}"
    return max(done.values())


@pytest.mark.parametrize("which", ["tiny", "mixed"])
def test_files_replay_without_deadlock_within_the_simulated_time(which, tiny_run, mixed_runs):
    """With a free network the replay can only be faster than the simulation it came from."""
    run = tiny_run if which == "tiny" else mixed_runs[0]
    ex = _exporter(run)
    nodes = {r: ex.nodes(r) for r in range(ex.world_size)}
    replay = _replay_us(nodes)
    assert replay <= round(run.result.makespan_s / US)
    compute = max(sum(n.duration_micros for n in ns if n.type is NodeType.COMP_NODE) for ns in nodes.values())
    assert replay >= compute


def test_export_is_deterministic(tiny_run, tmp_path):
    a, b = export_chakra(tiny_run, tmp_path / "a"), export_chakra(tiny_run, tmp_path / "b")
    assert all(x.read_bytes() == y.read_bytes() for x, y in zip(a.files, b.files))
    assert a.comm_groups_path.read_text() == b.comm_groups_path.read_text()


def test_layer_granularity_is_refused():
    run = _run(load_workload("tiny"), granularity="layer")
    with pytest.raises(NotBuiltError, match="granularity op"):
        _exporter(run)


def test_write_read_and_framing(tmp_path):
    nodes = [EtNode(0, "a", NodeType.COMP_NODE, duration_micros=3),
             EtNode(1, "b" * 300, NodeType.COMP_NODE, (0,), (0,), 3, 1)]
    path = tmp_path / "x.0.et"
    size = write_et(path, "0.0.4", (), nodes)
    assert size == path.stat().st_size
    assert read_et(path).nodes == nodes
    assert frame(bytes(127))[:1] == b"\x7f" and frame(bytes(128))[:2] == b"\x80\x01"
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(ValueError, match="runs past the end"):
        read_et(path)


def test_cli_run_chakra(tmp_path, capsys):
    out = tmp_path / "et"
    assert main(["run", "tiny", "--chakra", str(out)]) == 0
    assert "chakra: 8 execution traces" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == sorted([f"llmsim.{r}.et" for r in range(8)]
                                                          + ["llmsim.comm_groups.json"])
    assert main(["run", "tiny", "--chakra", str(tmp_path / "x"), "--granularity", "layer"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--granularity" in err
    assert not (tmp_path / "x").exists()


def test_folded_expert_groups_need_full(tmp_path):
    """Rank substitution shifts rank coordinates; expert groups folded across TP (etp != tp) are
    not built for it, so a representative run says so in one line instead of writing wrong
    groups."""
    import pytest

    from sim.config import load_topology, load_workload
    from sim.errors import ConfigError
    from sim.export.chakra import export_chakra
    from sim.runner import simulate

    w = load_workload("mixtral-8x7b", ["parallel.tp=2", "parallel.dp=8", "parallel.sequence_parallel=true",
                                       "parallel.etp=1"])
    run = simulate(w, load_topology("dgx-h100"))
    with pytest.raises(ConfigError, match="parallel.etp"):
        export_chakra(run, tmp_path)


def test_a_nodes_rank_attributes_are_appended_by_concatenation(mixed_runs):
    """``encode_node(n) + encode_node_attrs(add)`` is ``encode_node`` of ``n`` with ``add``
    appended (``attr`` is the last field): on every comm node of the mixed workload's template,
    with each rank's attributes, and on nodes with no attributes, ids of every size and long
    names."""
    from dataclasses import replace

    from sim.export.etfile import Attr, AttrType, encode_node, encode_node_attrs

    exp = _exporter(mixed_runs[0])
    checked = 0
    for rank in (0, 3, 5, exp.world_size - 1):
        added = exp._added(rank)
        for n, c in exp._template(exp.source(rank)):
            if c is not None:
                add = added(c)
                assert encode_node(n) + encode_node_attrs(add) == encode_node(replace(n, attrs=n.attrs + add))
                checked += 1
    assert checked > 100
    add = (Attr("pg_name", AttrType.STRING, "12"), Attr("comm_src", AttrType.INT32, 2**31 - 1))
    for n in (EtNode(0, "", NodeType.COMM_COLL_NODE),
              EtNode(2**40, "x" * 500, NodeType.COMM_SEND_NODE, (1, 2), (3,), 7, 9)):
        assert encode_node(n) + encode_node_attrs(add) == encode_node(replace(n, attrs=n.attrs + add))


def test_files_are_the_nodes_encoded_one_by_one(mixed_runs, tmp_path):
    """``write`` encodes a source rank's nodes once and completes comm nodes per rank by
    concatenation: every file equals its nodes (``nodes(rank)``) encoded and framed one by one."""
    from sim.export.chakra import SCHEMA_VERSION
    from sim.export.etfile import encode_metadata, encode_node

    for run in mixed_runs:
        exp = _exporter(run)
        out = exp.write(tmp_path / str(id(run)))
        for rank, path in enumerate(out.files):
            want = frame(encode_metadata(SCHEMA_VERSION, exp.metadata_attrs(rank))) + \
                b"".join(frame(encode_node(n)) for n in exp.nodes(rank))
            assert path.read_bytes() == want, rank

"""The pre-build cost estimate of :mod:`sim.budget` against what the jobs really take.

::

    python benchmarks/bench_budget.py                   # every case
    python benchmarks/bench_budget.py --only tiny gpt3  # the cases whose label holds a word
    python benchmarks/bench_budget.py --json budget.json

Each case runs in a fresh child process (``spawn``), so that its peak resident memory is its
own: the child loads the specs, takes the estimate (:func:`sim.budget.training_estimate`,
:func:`~sim.budget.inference_estimate`, :func:`~sim.budget.collective_estimate` or
:func:`~sim.budget.topology_estimate`), notes its peak resident set (``ru_maxrss``), runs the
job (:func:`sim.runner.simulate`, :func:`sim.inference.runner.simulate_inference`,
:func:`sim.studies.collective.collective` or :func:`sim.topology.build.build_topology`) and notes the
peak again. It prints, per case, the tasks (or flows, or topology nodes and links) estimated
and built, the estimated bytes, the growth of the peak resident set, and their ratio.

The estimate is meant to stay above the measured growth (ratio >= 1) and within a small factor
of it: the per-task and per-item constants of ``sim/budget.py`` are read off this table.
Resident-set growth counts what the allocator keeps, so small jobs (a few MB) read high or low
by the allocator's arenas; the large cases are the ones the constants follow.
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import sys

from harness import Column, Table, make_parser, write_json

import sim

MiB = 2**20

TRAINING = [  # label, preset, --set items, full, granularity
    ("tiny op", "tiny", [], False, "op"),
    ("gpt3-175b op", "gpt3-175b", [], False, "op"),
    ("gpt3-175b layer", "gpt3-175b", [], False, "layer"),
    ("gpt3-175b op full", "gpt3-175b", [], True, "op"),
    ("llama3-70b op", "llama3-70b", [], False, "op"),
    ("llama3-405b op", "llama3-405b", [], False, "op"),
    ("llama3-405b chunk", "llama3-405b", [], False, "chunk"),
    ("mixtral-8x7b op", "mixtral-8x7b", [], False, "op"),
    ("deepseek-v3 op", "deepseek-v3", [], False, "op"),
    ("gpt3-175b-1024 op", "gpt3-175b-1024", [], False, "op"),
]

INFERENCE = [  # label, model, gpu, tp, generated tokens, granularity
    ("infer llama2-7b op", "llama2-7b", "H100", 1, 256, "op"),
    ("infer llama2-7b layer", "llama2-7b", "H100", 1, 2048, "layer"),
    ("infer llama2-70b layer", "llama2-70b", "H100", 8, 2048, "layer"),
]

COLLECTIVES = [  # label, topology, op, ranks
    ("all-reduce 1024 dgx-h100", "dgx-h100", "all-reduce", 1024),
    ("all-to-all 256 dgx-h100", "dgx-h100", "all-to-all", 256),
]

TOPOLOGIES = [  # label, topology, --set items, GPUs
    ("torus-3d 4096", "torus-3d", ["scale_out.dims=[16, 16, 16]"], 4096),
    ("dragonfly 4096", "dragonfly", [], 4096),
    ("dgx-h100 16384", "dgx-h100", [], 16384),
    ("dgx-a100 16384", "dgx-a100", [], 16384),
]


def _peak() -> int:
    """Peak resident set of this process, bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _training(preset: str, sets: list[str], full: bool, granularity: str) -> dict:
    from sim.budget import training_estimate
    from sim.config import load_workload_with_notes
    from sim.runner import simulate
    from sim.topology.choice import place_workload

    workload, notes = load_workload_with_notes(preset, sets, None)
    topology = place_workload(workload, None, notes).topology
    est = training_estimate(workload, topology, full, granularity)
    before = _peak()
    run = simulate(workload, topology, full=full, granularity=granularity)
    return {"est_items": est.tasks, "items": len(run.program.tasks), "est_bytes": est.bytes,
            "grown_bytes": _peak() - before}


def _inference(model: str, gpu: str, tp: int, tokens: int, granularity: str) -> dict:
    from sim.budget import inference_estimate
    from sim.inference.config import InferenceArgs, build_spec
    from sim.inference.runner import fabric_gpus, simulate_inference

    spec, topo, _ = build_spec(InferenceArgs(model, gpu, tp=tp, generate=tokens))
    est = inference_estimate(spec, topo, fabric_gpus(spec, topo), granularity)
    before = _peak()
    run = simulate_inference(spec, topo, granularity=granularity)
    return {"est_items": est.tasks, "items": len(run.program.program.tasks), "est_bytes": est.bytes,
            "grown_bytes": _peak() - before}


def _collective(topology: str, op: str, ranks: int) -> dict:
    from sim.budget import collective_estimate
    from sim.config import load_topology
    from sim.studies.collective import collective
    from sim.types import CollectiveKind, parse_enum

    topo = load_topology(topology)
    kind = parse_enum(CollectiveKind, op, "<--op>", "--op")
    est = collective_estimate(topo, ranks, kind is CollectiveKind.ALL_TO_ALL)
    before = _peak()
    collective(topo, kind, 2**30, ranks)
    return {"est_items": est.tasks, "items": None, "est_bytes": est.bytes, "grown_bytes": _peak() - before}


def _topology(topology: str, sets: list[str], gpus: int) -> dict:
    from sim.budget import topology_estimate
    from sim.config import load_topology
    from sim.topology.fattree_index import FatTreeIndex
    from sim.topology.routing import Fabric

    topo = load_topology(topology, sets)
    est = topology_estimate(topo, gpus)
    before = _peak()
    fabric = Fabric.of(topo, gpus)
    grown = _peak() - before
    if FatTreeIndex.of(topo, gpus) is not None:  # read from the fat tree's structure: no graph to count
        return {"est_items": est.graph_items, "items": None, "est_bytes": est.bytes, "grown_bytes": grown}
    graph = fabric.graph
    return {"est_items": est.graph_items, "items": graph.number_of_nodes() + graph.number_of_edges(),
            "est_bytes": est.bytes, "grown_bytes": grown}


def _child(kind: str, args: tuple, out: mp.Queue) -> None:
    fn = {"training": _training, "inference": _inference, "collective": _collective, "topology": _topology}[kind]
    try:
        out.put(fn(*args))
    except Exception as exc:  # noqa: BLE001 -- a case that fails is printed, not the end of the table
        out.put({"error": f"{type(exc).__name__}: {exc}"[:200]})


def _run(kind: str, args: tuple) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(kind, args, q))
    p.start()
    res = q.get()
    p.join()
    return res


TABLE = Table((Column("case", 28, align="<"), Column("est. items", 12, ","), Column("built", 12),
               Column("est. MiB", 10, ",.1f"), Column("grown MiB", 10, ",.1f"), Column("ratio", 7, ".2f")), rule=False)


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__)
    ap.add_argument("--only", nargs="*", default=None, help="cases whose label holds one of these words")
    a = ap.parse_args(argv)
    cases = ([("training", c[0], c[1:]) for c in TRAINING] + [("inference", c[0], c[1:]) for c in INFERENCE]
             + [("collective", c[0], c[1:]) for c in COLLECTIVES] + [("topology", c[0], c[1:]) for c in TOPOLOGIES])
    if a.only:
        cases = [c for c in cases if any(w in c[1] for w in a.only)]
    print(f"llmsim {sim.__version__}, Python {sys.version.split()[0]}")
    print(TABLE.heading())
    rows = []
    for kind, label, args in cases:
        res = _run(kind, args)
        rows.append({"case": label, **res})
        if "error" in res:
            print(f"{label:28} {res['error']}")
            continue
        built = f"{res['items']:,}" if res["items"] is not None else "-"
        ratio = res["est_bytes"] / res["grown_bytes"] if res["grown_bytes"] > 0 else float("inf")
        print(TABLE.row((label, res["est_items"], built, res["est_bytes"] / MiB, res["grown_bytes"] / MiB, ratio)),
              flush=True)
    write_json(a.json, rows, fields=())
    return 0

if __name__ == "__main__":
    sys.exit(main())

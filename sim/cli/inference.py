"""The inference commands of ``llmsim``: ``infer``, ``roofline`` and ``validate-infer``
(:func:`register`), and the ``memory`` study of ``whatif`` (:func:`register_whatif_memory`,
called by :mod:`sim.cli.whatif`).

::

    llmsim infer [MODEL] [--gpu H100-SXM5-80GB] [--tp 1] [--pp 1] [--batch 1] [--prompt 200] [--generate 200]
                 [--dtype bf16] [--kv-dtype DTYPE] [--topology T] [--granularity layer|op|step]
                 [--stack NAME|FILE] [--trace PATH] [--json PATH]
    llmsim roofline [MODEL] [--gpu A100-SXM4-80GB,H100-SXM5-80GB,B200] [--phase prefill,decode] [...] [--plot PATH]
    llmsim whatif memory [MODEL] [--gpu H100-SXM5-80GB] [--hbm HBM2e,HBM3,HBM3e,HBM4] [...] [--plot PATH]
    llmsim validate-infer FILE [--stack NAME|FILE] [--json PATH]

``MODEL`` is a model file or preset (``workloads/models/``), a training workload (its model
section), or a Hugging Face ``config.json`` (:mod:`sim.inference.models`); the simulator itself
is :mod:`sim.inference` (docs/inference.md).
"""

from __future__ import annotations

import argparse

from sim.cli.io import add_budget_option
from sim.errors import ConfigError
from sim.inference.spec import KV_DTYPES
from sim.output.json_output import write_json
from sim.types import SIMULATED_DTYPES, dtype_names

__all__ = ["register", "register_whatif_memory"]

DEFAULT_ROOFLINE_GPUS = "A100-SXM4-80GB,H100-SXM5-80GB,B200"


def _spec_json(spec) -> dict:
    """What a roofline or memory what-if ran: the request and its parallel layout."""
    return {"model": spec.name, "tp": spec.tp, "pp": spec.pp, "batch": spec.batch,
            "prompt_tokens": spec.prompt_tokens, "generate_tokens": spec.generate_tokens,
            "dtype": spec.dtype.value, "kv_dtype": spec.kv_dtype.value}


def _args(a: argparse.Namespace, gpu: str | None = None):
    from sim.inference.config import InferenceArgs

    return InferenceArgs(a.model, gpu or a.gpu, a.tp, a.pp, a.batch, a.prompt, a.generate, a.dtype, a.kv_dtype,
                         a.topology)


def _cmd_infer(a: argparse.Namespace) -> int:
    from sim.inference.config import build_spec
    from sim.inference.report import format_inference_report, make_inference_report
    from sim.inference.runner import simulate_inference
    from sim.inference.stack import load_serving_stack

    spec, topo, notes = build_spec(_args(a))
    stack = load_serving_stack(a.stack)
    if a.stack is not None:
        notes.append(f"serving stack: {stack.shown()}")
    run = simulate_inference(spec, topo, granularity=a.granularity, notes=notes, stack=stack)
    report = make_inference_report(run)
    print(format_inference_report(report))
    if a.json:
        write_json(a.json, report.to_dict())
    if a.trace:
        from sim.output.trace import write_chrome_trace

        write_chrome_trace(run.result, a.trace, title=f"llmsim infer {spec.name}",
                           metadata={"model": spec.name, "gpu": spec.gpu.name, "topology": topo.name,
                                     "tp": spec.tp, "pp": spec.pp, "batch": spec.batch,
                                     "prompt_tokens": spec.prompt_tokens, "generate_tokens": spec.generate_tokens})
    return 0


def _cmd_roofline(a: argparse.Namespace) -> int:
    from sim.inference.config import build_spec, parse_gpus, parse_phases, topology_for
    from sim.inference.roofline import format_roofline, roofline

    gpus = parse_gpus(a.gpu)
    phases = parse_phases(a.phase)
    spec, _, _ = build_spec(_args(a, gpus[0].name), gpus[0])
    for g in gpus[1:]:
        build_spec(_args(a, g.name), g)  # the same checks (number formats) on every GPU
    result = roofline(spec, gpus, [topology_for(g, a.topology) for g in gpus], phases)
    print(format_roofline(spec, result))
    if a.json:
        write_json(a.json, {**_spec_json(spec), "gpus": [g.to_dict() for g in result]})
    if a.plot:
        from sim.output.plot import plot_roofline

        plot_roofline(result, a.plot, f"{spec.name}: batch {spec.batch}, prompt {spec.prompt_tokens}, TP {spec.tp}, "
                      f"{spec.dtype.value}")
    return 0


def _cmd_whatif_memory(a: argparse.Namespace) -> int:
    from sim.inference.config import build_spec
    from sim.inference.hbm import format_memory_whatif, load_hbm_table, memory_whatif

    table = load_hbm_table(a.table)
    spec, topo, _ = build_spec(_args(a))
    gens = [g for g in a.hbm.split(",") if g.strip()] if a.hbm is not None else None
    if gens == []:
        raise ConfigError("<--hbm>", "--hbm", "comma-separated HBM generations of the table, e.g. HBM3,HBM3e", a.hbm)
    rows = memory_whatif(spec, topo, gens, table, a.granularity)
    print(format_memory_whatif(spec, rows))
    if a.json:
        write_json(a.json, {**_spec_json(spec), "gpu": spec.gpu.name, "rows": [r.to_dict() for r in rows]})
    if a.plot:
        from sim.output.plot import plot_hbm_generations

        plot_hbm_generations(rows, a.plot, f"{spec.name} on {spec.num_gpus} x {spec.gpu.name}: batch {spec.batch}, "
                             f"prompt {spec.prompt_tokens}, generate {spec.generate_tokens}")
    return 0


def _cmd_validate_infer(a: argparse.Namespace) -> int:
    from sim.inference.stack import load_serving_stack
    from sim.inference.validate import format_inference_validation, validate_inference

    v = validate_inference(a.file, stack=load_serving_stack(a.stack) if a.stack is not None else None)
    print(format_inference_validation(v))
    if a.json:
        write_json(a.json, v.to_dict())
    return 0


def _common(p: argparse.ArgumentParser, gpu_default: str, gpu_help: str) -> None:
    p.add_argument("model", nargs="?", default=None, help="model file or preset (workloads/models/: llama2-7b, "
                   "llama2-13b, llama2-70b, llama3-8b, llama3-70b), a workload (its model section) or a "
                   "Hugging Face config.json (default llama2-7b)")
    p.add_argument("--gpu", default=gpu_default, help=gpu_help)
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs (default 1)")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages (default 1)")
    p.add_argument("--batch", type=int, default=1, help="requests served together (default 1)")
    p.add_argument("--prompt", type=int, default=200, help="input tokens per request (default 200)")
    p.add_argument("--generate", type=int, default=200, help="output tokens per request, the first one from "
                   "the prefill (default 200)")
    p.add_argument("--dtype", default="bf16", help="format of the layers' weights and GEMMs: "
                   f"{dtype_names(SIMULATED_DTYPES)}, those the GPU has tensor cores for (default bf16)")
    p.add_argument("--kv-dtype", default=None, help=f"format of the KV cache: {dtype_names(KV_DTYPES)} "
                   "(default: 16 bits)")
    p.add_argument("--topology", help="topology YAML or preset (default: the GPU's usual one)")
    p.add_argument("--json", metavar="PATH", help="write the same numbers as JSON")


def register(sub) -> None:
    """Add ``infer``, ``roofline`` and ``validate-infer`` to ``llmsim``'s subcommands."""
    inf = sub.add_parser("infer", help="simulate the prefill and decode of one batch of requests",
                         description="Simulate prefill and every decode step on the topology and report time to "
                         "first token, time per output token, end-to-end latency, tokens/s and memory per GPU.")
    _common(inf, "H100-SXM5-80GB", "GPU (default H100-SXM5-80GB)")
    inf.add_argument("--granularity", choices=("layer", "op", "step"), default="layer",
                     help="layer: each layer of each step one block (default); op: every kernel and collective "
                     "a task (the most detailed trace); step: a stage's layers of one step one block (fastest)")
    inf.add_argument("--stack", metavar="NAME|FILE", default=None, help="serving stack whose host issues the "
                     "kernels: a file or one of workloads/inference/stacks/ (default cuda-graphs: steps replayed as "
                     "CUDA graphs, no host work counted)")
    inf.add_argument("--trace", metavar="PATH", help="write a Chrome trace (gzip if PATH ends in .gz)")
    inf.set_defaults(func=_cmd_infer)
    add_budget_option(inf)
    roof = sub.add_parser("roofline", help="every GEMM and attention op of a layer against each GPU's ridge point",
                          description="Per GPU and phase: FLOPs, bytes, arithmetic intensity, the ridge point, "
                          "compute- or memory-bound, and the time the simulator charges.")
    _common(roof, DEFAULT_ROOFLINE_GPUS, f"comma-separated GPUs (default {DEFAULT_ROOFLINE_GPUS})")
    roof.add_argument("--phase", default="both", help="prefill, decode, or both (the default; also "
                      "prefill,decode)")
    roof.add_argument("--plot", metavar="PATH", help="draw the rooflines with the ops on them (needs matplotlib)")
    roof.set_defaults(func=_cmd_roofline)
    val = sub.add_parser("validate-infer", help="simulate published single-request latencies and score them",
                         description="Reads a file of measured inference latencies (default: the shipped cases, "
                         "workloads/inference/latency.yaml), simulates every case and prints measured, predicted "
                         "and the error per metric.")
    val.add_argument("file", metavar="FILE", nargs="?", default=None,
                     help="case file (default: the shipped cases, workloads/inference/latency.yaml)")
    val.add_argument("--stack", metavar="NAME|FILE", default=None, help="run every case on this serving stack "
                     "(default: each case's own, matched by its framework text)")
    val.add_argument("--json", metavar="PATH", help="write the rows and the summary as JSON")
    val.set_defaults(func=_cmd_validate_infer)
    add_budget_option(val)


def register_whatif_memory(wsub) -> None:
    """Add ``whatif memory`` to the ``whatif`` studies."""
    mem = wsub.add_parser("memory", help="swap the GPU's HBM generation and see inference latency per phase",
                          description="Give the GPU each HBM generation's bandwidth and capacity "
                          "(topologies/hbm-generations.yaml), simulate one batch of requests on each and print "
                          "time to first token, time per output token and whether the model and KV cache fit.")
    _common(mem, "H100-SXM5-80GB", "GPU (default H100-SXM5-80GB)")
    mem.add_argument("--hbm", help="comma-separated generations (default: every one of the table: HBM2e, HBM3, "
                     "HBM3e, HBM4)")
    mem.add_argument("--table", help="HBM table YAML (default topologies/hbm-generations.yaml)")
    mem.add_argument("--granularity", choices=("layer", "op", "step"), default="step", help=argparse.SUPPRESS)
    mem.add_argument("--plot", metavar="PATH", help="draw TTFT and TPOT per generation (needs matplotlib)")
    mem.set_defaults(func=_cmd_whatif_memory)

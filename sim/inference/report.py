"""The report of one inference simulation: latencies, throughput, where the time goes, memory.

Definitions (those of NVIDIA's genai-perf and TensorRT-LLM's benchmarks):

* time to first token (TTFT): from the start until the prefill's sampling ends on the last
  pipeline stage;
* time per output token (TPOT, inter-token latency): the mean decode step, from one step's
  sampling to the next; with ``G`` output tokens there are ``G - 1`` decode steps;
* end-to-end latency: the last step's sampling, so ``e2e = TTFT + (G - 1) x TPOT`` exactly;
* output tokens/s: ``batch x G / e2e``; decode tokens/s: ``batch / TPOT``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.inference.host import HostOp
from sim.inference.memory import StageMemory, stage_memory
from sim.inference.program import phase_of
from sim.inference.runner import InferenceRun
from sim.inference.spec import Phase
from sim.program import Block
from sim.types import CommClass, OpKind, Stream
from sim.units import MS, GiB, byte_count
from sim.version import __version__

__all__ = ["InferenceReport", "make_inference_report", "format_inference_report"]

_KINDS = (OpKind.GEMM, OpKind.ATTENTION, OpKind.NORM, OpKind.ELEMENTWISE, OpKind.EMBEDDING)


@dataclass(frozen=True)
class InferenceReport:
    """Everything ``llmsim infer`` prints, in SI units."""

    model: str
    gpu: str
    topology: str
    tp: int
    pp: int
    batch: int
    prompt_tokens: int
    generate_tokens: int
    dtype: str
    kv_dtype: str
    ttft_s: float
    tpot_s: float
    tpot_first_s: float
    tpot_last_s: float
    e2e_latency_s: float
    breakdown_s: dict
    """Per phase: compute per op kind (summed over the stages), exposed TP communication, the
    GPU waiting for its host (:mod:`sim.inference.host`) and the rest (pipeline transfers and
    waits), adding up to the phase's time."""
    stages: tuple[StageMemory, ...]
    peak_memory_bytes: tuple[float, ...]
    """Each stage's peak on the simulated timeline (equal to the closed form's total)."""
    tasks: int
    events: int
    granularity: str
    simulated_wall_s: float
    notes: tuple[str, ...] = ()
    stack: str = ""
    """The serving stack whose host issued the kernels (:mod:`sim.inference.stack`)."""

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp

    @property
    def decode_steps(self) -> int:
        return self.generate_tokens - 1

    @property
    def output_tokens_per_s(self) -> float:
        return self.batch * self.generate_tokens / self.e2e_latency_s

    @property
    def decode_tokens_per_s(self) -> float:
        return self.batch / self.tpot_s if self.tpot_s > 0 else 0.0

    @property
    def fits_in_memory(self) -> bool:
        return all(s.fits for s in self.stages)

    def to_dict(self) -> dict:
        """The report with units in the key names; deterministic (no wall-clock time)."""
        return {
            "model": self.model, "gpu": self.gpu, "topology": self.topology, "tp": self.tp, "pp": self.pp,
            "num_gpus": self.num_gpus, "batch": self.batch, "prompt_tokens": self.prompt_tokens,
            "generate_tokens": self.generate_tokens, "decode_steps": self.decode_steps, "dtype": self.dtype,
            "kv_dtype": self.kv_dtype, "ttft_s": self.ttft_s, "tpot_s": self.tpot_s,
            "tpot_first_s": self.tpot_first_s, "tpot_last_s": self.tpot_last_s,
            "e2e_latency_s": self.e2e_latency_s, "output_tokens_per_s": self.output_tokens_per_s,
            "output_tokens_per_s_per_gpu": self.output_tokens_per_s / self.num_gpus,
            "decode_tokens_per_s": self.decode_tokens_per_s, "breakdown_s": self.breakdown_s,
            "memory": [s.to_dict() for s in self.stages],
            "peak_memory_bytes": [byte_count(b) for b in self.peak_memory_bytes], "fits_in_memory": self.fits_in_memory,
            "granularity": self.granularity, "tasks": self.tasks, "events": self.events,
            "notes": list(self.notes), "stack": self.stack,
        }


def _breakdown(run: InferenceRun) -> dict:
    """Compute per kind from the program and the cost model, TP from the spans."""
    costs = run.costs
    comp = {p: {k: 0.0 for k in _KINDS} for p in Phase}
    price: dict[int, tuple] = {}
    each: dict[int, float] = {}
    host = {p: 0.0 for p in Phase}
    for t in run.program.program.tasks:
        if t.comm:
            continue
        if type(t.op) is HostOp:
            host[phase_of(t)] += t.op.seconds
            continue
        hit = price.get(id(t.op))
        if hit is None:
            kinds: dict[OpKind, float] = {}
            ops = [op for s, op in zip(t.op.streams, t.op.ops) if s is None] if type(t.op) is Block else [t.op]
            for op in ops:
                d = each.get(id(op))
                if d is None:
                    d = each[id(op)] = costs.compute_time_s(op)
                kinds[op.kind] = kinds.get(op.kind, 0.0) + d
            hit = price[id(t.op)] = tuple(kinds.items())
        acc = comp[phase_of(t)]
        for k, v in hit:
            acc[k] += v
    tp = {p: 0.0 for p in Phase}
    host_spans, arrived = [], {}
    for s in run.result.spans:
        if s.comm_class is CommClass.TP:
            tp[Phase(dict(s.args)["phase"])] += s.end_s - s.start_s
        elif s.kind is OpKind.HOST:
            host_spans.append(s)
        elif s.stream is Stream.PP_RECV:
            key = (s.rank, dict(s.args)["step"])
            arrived[key] = max(arrived.get(key, 0.0), s.end_s)
    if host_spans:
        # what the host kept the GPU waiting: a later stage's host works while its GPU waits for
        # the hidden states anyway, and only the part past their arrival delays the step
        host = {p: 0.0 for p in Phase}
        for s in host_spans:
            a = dict(s.args)
            host[Phase(a["phase"])] += max(0.0, s.end_s - max(s.start_s, arrived.get((s.rank, a["step"]), 0.0)))
    ends = run.step_end_s
    total = {Phase.PREFILL: ends[0], Phase.DECODE: ends[-1] - ends[0]}
    out = {}
    for p in Phase:
        d = {f"{k.value}_s": comp[p][k] for k in _KINDS}
        d["compute_s"] = sum(comp[p].values())
        d["exposed_tp_comm_s"] = tp[p]
        d["host_s"] = host[p]
        d["pipeline_and_other_s"] = max(0.0, total[p] - d["compute_s"] - tp[p] - host[p])
        d["total_s"] = total[p]
        out[p.value] = d
    return out


def make_inference_report(run: InferenceRun) -> InferenceReport:
    """Collect the report of ``run``."""
    spec, ends = run.spec, run.step_end_s
    steps = [b - a for a, b in zip(ends, ends[1:])]
    tpot = (ends[-1] - ends[0]) / len(steps) if steps else 0.0
    peaks: dict[int, float] = {}
    for c in run.result.counters:
        if c.name == "memory":
            peaks[c.rank] = max(peaks.get(c.rank, 0.0), c.value)
    ranks = sorted(run.program.program.ranks, key=lambda r: r.pp)
    return InferenceReport(
        model=spec.name, gpu=spec.gpu.name, topology=run.topology.name, tp=spec.tp, pp=spec.pp,
        batch=spec.batch, prompt_tokens=spec.prompt_tokens, generate_tokens=spec.generate_tokens,
        dtype=spec.dtype.value, kv_dtype=spec.kv_dtype.value, ttft_s=ends[0], tpot_s=tpot,
        tpot_first_s=steps[0] if steps else 0.0, tpot_last_s=steps[-1] if steps else 0.0,
        e2e_latency_s=ends[-1], breakdown_s=_breakdown(run), stages=stage_memory(spec),
        peak_memory_bytes=tuple(peaks.get(r.rank, 0.0) for r in ranks), tasks=len(run.program.program.tasks),
        events=run.result.events, granularity=run.granularity, simulated_wall_s=run.wall_s,
        notes=tuple(run.notes), stack=run.stack.name if run.stack is not None else "")


def _ms(x: float) -> str:
    return f"{x / MS:,.3f} ms"


def format_inference_report(r: InferenceReport) -> str:
    """The printed report."""
    lines = [f"llmsim {__version__} infer: {r.model} on {r.num_gpus} x {r.gpu} ({r.topology})",
             f"  TP {r.tp}  PP {r.pp}  {r.dtype} (KV cache {r.kv_dtype})  batch {r.batch}  "
             f"prompt {r.prompt_tokens} tokens  generate {r.generate_tokens} tokens", ""]
    lines.append(f"  time to first token     {_ms(r.ttft_s)}")
    if r.decode_steps:
        lines.append(f"  time per output token   {_ms(r.tpot_s)}  (mean of {r.decode_steps} decode steps: first "
                     f"{r.tpot_first_s / MS:,.3f}, last {r.tpot_last_s / MS:,.3f})")
    e2e = _ms(r.e2e_latency_s) if r.e2e_latency_s < 1.0 else f"{r.e2e_latency_s:,.4f} s"
    lines.append(f"  end-to-end latency      {e2e}  (= TTFT + {r.decode_steps} x TPOT)")
    lines.append(f"  throughput              {r.output_tokens_per_s:,.1f} output tokens/s "
                 f"({r.output_tokens_per_s / r.num_gpus:,.1f} per GPU)"
                 + (f"; decode {r.decode_tokens_per_s:,.1f} tokens/s" if r.decode_steps else ""))
    lines += ["", f"  {'where the time goes (s, summed over pipeline stages)':<52}{'prefill':>10} {'decode':>12}"]
    pre, dec = r.breakdown_s["prefill"], r.breakdown_s["decode"]
    rows = [(k.value, f"{k.value}_s") for k in _KINDS] + [
        ("compute", "compute_s"), ("exposed TP communication", "exposed_tp_comm_s"),
        ("waiting for the host", "host_s"), ("pipeline transfers, other", "pipeline_and_other_s"),
        ("total", "total_s")]
    kinds = {k.value for k in _KINDS}
    for label, key in rows:
        if label in ("compute", "total") or pre[key] or dec[key]:
            label = f"  {label}" if label in kinds else label
            lines.append(f"    {label:<50}{pre[key]:>10.6f} {dec[key]:>12.6f}")
    lines += ["", "  memory per GPU at the end of generation",
              "  stage  weights GiB  KV cache GiB  activations GiB  total GiB  peak on timeline  of GiB  fits"]
    for s, peak in zip(r.stages, r.peak_memory_bytes):
        lines.append(f"  {s.stage:>5}  {s.weights_bytes / GiB:>11.2f}  {s.kv_cache_bytes / GiB:>12.3f}  "
                     f"{s.activations_bytes / GiB:>15.3f}  {s.total_bytes / GiB:>9.2f}  {peak / GiB:>16.2f}  "
                     f"{s.capacity_bytes / GiB:>6.1f}  {'yes' if s.fits else 'DOES NOT FIT'}")
    if r.notes:
        lines += ["", "  notes:"] + [f"    {n}" for n in r.notes]
    lines += ["", f"  simulated {r.pp} rank{'s' if r.pp > 1 else ''}, {r.tasks:,} tasks ({r.granularity} granularity), "
              f"{r.events:,} engine events"]
    return "\n".join(lines)

"""``llmsim roofline``: every GEMM and attention op of a layer against each GPU's ridge point.

The roofline of Williams, Waterman and Patterson (CACM 52(4), 2009): an op of ``F`` FLOPs that
moves ``B`` bytes to and from DRAM has arithmetic intensity ``I = F / B``; a GPU with peak
``P`` FLOP/s and memory bandwidth ``W`` bytes/s has its ridge point at ``P / W``. An op left of
the ridge is memory-bound (it can reach at most ``I x W``), right of it compute-bound. The
verdict here compares ``I`` with the ridge of the op's number format; the time is the one the
simulator charges (:mod:`sim.costs.compute`: the same roofline with the measured efficiencies
and the launch gap), and ``bound_by`` says which of its two terms is the larger.

The seed paper (BanaGozar et al., arXiv 2407.14645, Sec. 6) draws this per op for prefill and
decode on several GPU systems; decode GEMMs at small batch have ``I`` about the batch size
(``2 b h n / (2 (b h + h n + b n)) ~ b``), far left of ridges of 150-300 FLOP/B, and the
attention GEMMs against the KV cache about the query heads per KV head, whatever the batch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sim.costs.comm import plan_comm
from sim.costs.compute import attention_time_s, gemm_time_s, memory_time_s
from sim.engine.network import solo_time_s
from sim.hardware import GPUSpec
from sim.inference.ops import StepShape, head_steps, layer_steps
from sim.inference.runner import fabric_for
from sim.inference.spec import InferenceSpec, Phase
from sim.topology.spec import TopologySpec
from sim.types import Dtype
from sim.units import byte_count
from sim.workload.ops import AttentionOp, CommOp, GemmOp

__all__ = ["OpRow", "PhaseRoofline", "GPURoofline", "roofline", "format_roofline", "ridge_flops_per_byte"]


def ridge_flops_per_byte(gpu: GPUSpec, dtype: Dtype) -> float:
    """The ridge point: dense peak FLOP/s in ``dtype`` over HBM bytes/s.

    >>> from sim.hardware import get_gpu
    >>> a100, h100 = get_gpu("A100"), get_gpu("H100")
    >>> round(ridge_flops_per_byte(a100, Dtype.BF16)), round(ridge_flops_per_byte(h100, Dtype.BF16))
    (153, 295)
    """
    return gpu.peak(dtype) / gpu.hbm_bandwidth_bytes_per_s


@dataclass(frozen=True)
class OpRow:
    """One op of a layer (or of the output layer) in one phase on one GPU."""

    name: str
    kind: str
    shape: str
    flops: float
    bytes: float
    ridge_flops_per_byte: float
    verdict: str
    """``compute-bound`` / ``memory-bound`` (intensity against the ridge), or ``communication``."""
    time_s: float
    bound_by: str
    """Which term of the simulator's time is larger: ``compute`` or ``memory`` (or ``network``)."""
    per_layer: bool = True
    dtype: str = ""
    """The number format whose peak sets the ridge (empty for communication)."""

    @property
    def intensity_flops_per_byte(self) -> float:
        return self.flops / self.bytes if self.bytes > 0 else 0.0

    @property
    def achieved_flops_per_s(self) -> float:
        return self.flops / self.time_s if self.time_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "shape": self.shape, "flops": self.flops,
                "bytes": byte_count(self.bytes),
                "intensity_flops_per_byte": self.intensity_flops_per_byte,
                "ridge_flops_per_byte": self.ridge_flops_per_byte, "verdict": self.verdict,
                "time_s": self.time_s, "bound_by": self.bound_by, "achieved_flops_per_s": self.achieved_flops_per_s,
                "per_layer": self.per_layer, "dtype": self.dtype}


@dataclass(frozen=True)
class PhaseRoofline:
    phase: Phase
    tokens: int
    """New tokens over the batch (the GEMMs' ``m``)."""
    context: int
    ops: tuple[OpRow, ...]

    @property
    def layer_time_s(self) -> float:
        return sum(r.time_s for r in self.ops if r.per_layer)

    @property
    def memory_bound_fraction(self) -> float:
        """Share of one layer's time spent in memory-bound ops."""
        t = self.layer_time_s
        return sum(r.time_s for r in self.ops if r.per_layer and r.verdict == "memory-bound") / t if t else 0.0

    def to_dict(self) -> dict:
        return {"phase": self.phase.value, "tokens": self.tokens, "context": self.context,
                "layer_time_s": self.layer_time_s, "memory_bound_time_fraction": self.memory_bound_fraction,
                "ops": [r.to_dict() for r in self.ops]}


@dataclass(frozen=True)
class GPURoofline:
    gpu: GPUSpec
    topology: str
    phases: tuple[PhaseRoofline, ...]

    def to_dict(self) -> dict:
        g = self.gpu
        return {"gpu": g.name, "topology": self.topology, "hbm_bandwidth_bytes_per_s": g.hbm_bandwidth_bytes_per_s,
                "peak_flops_per_s": {d.value: v for d, v in g.peak_flops_per_s},
                "phases": [p.to_dict() for p in self.phases]}


def _terms(gpu: GPUSpec, op) -> tuple[float, float, float]:
    """(simulated time, compute term, memory term) of a compute op."""
    share = gpu.gemm_streaming_efficiency if isinstance(op, GemmOp) else gpu.memory_efficiency
    mem = op.bytes / (gpu.hbm_bandwidth_bytes_per_s * share)
    if isinstance(op, GemmOp):
        f = op.flops
        return gemm_time_s(gpu, op), f / (gpu.peak(op.dtype) * gpu.gemm_curve(op.dtype)(f)), mem
    if isinstance(op, AttentionOp):
        f = op.flops
        return attention_time_s(gpu, op), f / (gpu.peak(op.dtype) * gpu.attention_curve(op.kernel, False)(f)), mem
    return memory_time_s(gpu, op), 0.0, mem


def _shape(op) -> str:
    if isinstance(op, GemmOp):
        return f"{op.batch} x " * (op.batch > 1) + f"{op.m}x{op.n}x{op.k} {op.dtype.value}"
    if isinstance(op, AttentionOp):
        return f"b{op.batch} h{op.heads}/{op.kv_heads} s{op.seq} d{op.head_dim} causal"
    if isinstance(op, CommOp):
        return f"{op.size_bytes:,.0f} B over {len(op.group)}"
    return f"{op.bytes:,.0f} B"


def _rows(spec: InferenceSpec, shape: StepShape, topology: TopologySpec) -> list[OpRow]:
    gpu = spec.gpu
    group = tuple(range(spec.tp))
    fabric = fabric_for(spec, topology) if spec.tp > 1 else None
    out = []
    for per_layer, steps in ((True, layer_steps(spec, shape, group)), (False, head_steps(spec, shape, group))):
        seen_comm: dict[tuple, float] = {}
        for st in steps:
            op = st.op
            if isinstance(op, CommOp):
                key = (op.collective, op.size_bytes)
                if key not in seen_comm:
                    plan = plan_comm(fabric, op, representative=False)
                    seen_comm[key] = solo_time_s(plan.phases, fabric.capacity_bytes_per_s)
                out.append(OpRow(st.name, op.op_kind.value, _shape(op), 0.0, op.size_bytes, 0.0, "communication",
                                 seen_comm[key], "network", per_layer))
                continue
            t, comp, mem = _terms(gpu, op)
            dtype = getattr(op, "dtype", Dtype.BF16)
            ridge = ridge_flops_per_byte(gpu, dtype)
            intensity = op.flops / op.bytes if op.bytes else 0.0
            verdict = "compute-bound" if intensity > ridge else "memory-bound"
            out.append(OpRow(st.name, op.kind.value, _shape(op), op.flops, op.bytes, ridge, verdict, t,
                             "compute" if comp > mem else "memory", per_layer, dtype.value))
    return out


def roofline(spec: InferenceSpec, gpus: list[GPUSpec], topologies: list[TopologySpec],
             phases: tuple[Phase, ...] = (Phase.PREFILL, Phase.DECODE)) -> list[GPURoofline]:
    """Every op of one layer (and the output layer) per phase on each GPU.

    The prefill processes ``batch x prompt`` tokens; the decode row is the last decode step,
    ``batch`` tokens against a cache of ``prompt + generate - 1`` tokens per request.

    >>> from sim.config import load_topology
    >>> from sim.hardware import get_gpu
    >>> from sim.inference.models import load_model
    >>> name, m, _ = load_model("llama2-7b")
    >>> spec = InferenceSpec(name, m, get_gpu("A100"), batch=1, prompt_tokens=2048, generate_tokens=200)
    >>> r = roofline(spec, [get_gpu("A100")], [load_topology("dgx-a100")])[0]
    >>> [(p.phase.value, {o.name: o.verdict for o in p.ops}["fc1"]) for p in r.phases]
    [('prefill', 'compute-bound'), ('decode', 'memory-bound')]
    """
    out = []
    for gpu, topo in zip(gpus, topologies):
        s = dataclasses.replace(spec, gpu=gpu)
        rows = []
        for phase in phases:
            shape = StepShape.prefill(s.prompt_tokens) if phase is Phase.PREFILL else \
                StepShape.decode(s.prompt_tokens, max(s.decode_steps, 1))
            rows.append(PhaseRoofline(phase, s.batch * shape.new_tokens, shape.context, tuple(_rows(s, shape, topo))))
        out.append(GPURoofline(gpu, topo.name, tuple(rows)))
    return out


def format_roofline(spec: InferenceSpec, result: list[GPURoofline]) -> str:
    """The printed tables, one per GPU and phase."""
    lines = [f"llmsim roofline: {spec.name}, TP {spec.tp}, batch {spec.batch}, prompt {spec.prompt_tokens}, "
             f"generate {spec.generate_tokens}, {spec.dtype.value} (KV cache {spec.kv_dtype.value})"]
    for g in result:
        gpu = g.gpu
        lines += ["", f"{gpu.name}: {gpu.peak(spec.dtype) / 1e12:,.0f} TFLOP/s {spec.dtype.value}, "
                  f"{gpu.hbm_bandwidth_bytes_per_s / 1e12:.2f} TB/s HBM -> ridge "
                  f"{ridge_flops_per_byte(gpu, spec.dtype):,.0f} FLOP/B ({spec.dtype.value})"]
        for p in g.phases:
            what = (f"{p.tokens} tokens (batch x prompt)" if p.phase is Phase.PREFILL else
                    f"{p.tokens} token{'s' if p.tokens > 1 else ''} (one per request), {p.context} cached per request")
            lines.append(f"  {p.phase.value}: {what}; one layer {p.layer_time_s * 1e6:,.1f} us, "
                         f"{p.memory_bound_fraction:.0%} of it in memory-bound ops")
            lines.append(f"    {'op':<32}{'shape':<34}{'GFLOP':>10}{'MB':>10}{'FLOP/B':>9}{'ridge':>7}  "
                         f"{'verdict':<15}{'time us':>10}  bound by")
            for r in p.ops:
                name = r.name if r.per_layer else f"{r.name} (per step)"
                lines.append(f"    {name:<32}{r.shape:<34}{r.flops / 1e9:>10.3f}{r.bytes / 1e6:>10.3f}"
                             f"{r.intensity_flops_per_byte:>9.1f}{r.ridge_flops_per_byte:>7.0f}  {r.verdict:<15}"
                             f"{r.time_s * 1e6:>10.2f}  {r.bound_by}")
    return "\n".join(lines)

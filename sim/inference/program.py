"""An inference run as a task program: the prefill, then every decode step, on each pipeline stage.

One representative GPU per pipeline stage is simulated (the TP ranks of a stage run the same
program); its TP collectives are planned over the real group, so the fabric prices them.
Per step, each stage receives the step's hidden states from the stage before (the first stage
embeds the tokens instead, after receiving the tokens the last stage sampled), runs its layers
and sends its output on; the last stage runs the output layer and samples. The whole batch
moves through the stages together (no micro-batching), as a single request does.

Granularity: ``"op"`` makes every kernel and collective a task; ``"layer"`` makes each layer
of each step one :class:`~sim.program.Block`, timed alone from the same prices (its
collectives at their solo times) and shared by every layer of the step; ``"step"`` makes all
of a stage's layers in one step one block. Serving one batch, nothing but the pipeline's
transfers can share a link with a layer's collectives, and those never run at the same time,
so the three give the same times (to rounding; tested); the layer level has about 12 times
fewer tasks than the op level, the step level about as many tasks as there are steps.

The host: given a ``host_gap`` (:mod:`sim.inference.host`), each stage's step starts with a
``host`` task, the time that stage's GPU waits for its host to issue the step's kernels (the
embedding, the layers' ops and collectives, the output layer; not the pipeline's transfers),
after its own previous step.

The KV cache grows on each GPU's memory counter as each layer writes its new keys and values;
the weights and the activation buffers are the static memory (:mod:`sim.inference.memory`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sim.inference.host import HostOp
from sim.inference.memory import activation_bytes, weights_bytes
from sim.inference.ops import (
    TOKEN_ID_BYTES,
    StepShape,
    embedding_steps,
    head_steps,
    hidden_bytes,
    kv_bytes_per_token_layer,
    layer_steps,
)
from sim.inference.spec import InferenceSpec, Phase
from sim.program import Block, Program, Task
from sim.results import RankInfo
from sim.types import CollectiveKind, CommClass, OpKind, Stream
from sim.workload.layout import Layout
from sim.workload.ops import CommOp, Op
from sim.workload.steps import Step

__all__ = ["GRANULARITIES", "HostGap", "InferenceProgram", "build_inference_program", "step_shape"]

GRANULARITIES = ("op", "layer", "step")

HostGap = Callable[[int, int, tuple[Step, ...]], float]
"""``host_gap(stage, step, ops)``: seconds the stage's GPU waits for its host before the step."""


def step_shape(spec: InferenceSpec, step: int) -> StepShape:
    """Step 0 is the prefill; step ``i >= 1`` the ``i``-th decode step."""
    return StepShape.prefill(spec.prompt_tokens) if step == 0 else StepShape.decode(spec.prompt_tokens, step)


@dataclass
class InferenceProgram:
    """The program and, per step, the task whose end makes that step's tokens available
    (the last stage's sampling)."""

    program: Program
    step_end_tasks: list[int]


class _Builder:
    def __init__(self) -> None:
        self.ops: dict = {}
        """Every op, interned: steps that repeat a shape share one object, so the engine and
        the cost model price it once."""
        self.tasks: list[Task] = []
        self.streams: dict[tuple[int, Stream], list[int]] = {}
        self.keys: dict[tuple, int] = {}
        self.members: dict[int, int] = {}

    def intern(self, steps) -> tuple[Step, ...]:
        out = []
        for st in steps:
            op = self.ops.setdefault(st.op, st.op)
            out.append(st if op is st.op else Step(st.stream, st.name, op, st.wait))
        return tuple(out)

    def add(self, rank: int, stream: Stream, name: str, op: Op, deps: list[int], args: tuple,
            key: tuple | None = None, kind: OpKind | None = None) -> Task:
        comm = isinstance(op, CommOp)
        kind = kind if kind is not None else (op.op_kind if comm else op.kind)
        task = Task(len(self.tasks), rank, stream, name, op, kind, comm, deps, args)
        if key is not None:
            k = self.keys.setdefault(key, len(self.keys))
            task.coll_key = k
            self.members[k] = self.members.get(k, 0) + 1
        self.tasks.append(task)
        self.streams.setdefault((rank, stream), []).append(task.id)
        return task


class _StageProgram:
    """Writes one simulated GPU's tasks (stage ``stage``, TP rank 0)."""

    def __init__(self, b: _Builder, spec: InferenceSpec, layout: Layout, stage: int, granularity: str,
                 host_gap: HostGap | None = None) -> None:
        self.b, self.spec, self.layout, self.stage = b, spec, layout, stage
        self.host_gap = host_gap
        self.rank = layout.rank(0, 0, stage)
        self.group = layout.tp_group(0, stage)
        self.replicas = layout.tp_groups(stage)
        self.granularity = granularity
        self.last_c = -1
        self.extra: list[int] = []
        self.seq: dict[tuple, int] = {}
        self.p2p_ops: dict[tuple, CommOp] = {}

    def compute(self, name: str, op: Op, args: tuple, kind: OpKind | None = None) -> Task:
        deps, self.extra = self.extra, []
        t = self.b.add(self.rank, Stream.COMPUTE, name, op, deps, args, kind=kind)
        self.last_c = t.id
        return t

    def run(self, steps, args: tuple, kv_bytes: float = 0.0) -> Task:
        """Issue ``steps`` (each collective waited for by the next compute op); the KV write
        adds ``kv_bytes`` to the memory counter when it ends. Returns the last compute task."""
        last = None
        for st in steps:
            if st.stream is not None:
                n = self.seq.get(st.op.group, 0)
                self.seq[st.op.group] = n + 1
                t = self.b.add(self.rank, st.stream, st.name, st.op, [self.last_c] if self.last_c >= 0 else [],
                               args, key=(st.op.group, n))
                self.extra.append(t.id)
            else:
                last = self.compute(st.name, st.op, args, st.kind)
                if kv_bytes and st.name == "rope-kv-write":
                    last.mem_end_bytes += kv_bytes
        return last

    def p2p(self, src_stage: int, dst_stage: int, size: float) -> CommOp:
        key = (src_stage, dst_stage, size)
        op = self.p2p_ops.get(key)
        if op is None:
            lay = self.layout
            op = self.p2p_ops[key] = CommOp(CollectiveKind.SEND_RECV, CommClass.PP,
                                            (lay.rank(0, 0, src_stage), lay.rank(0, 0, dst_stage)), float(size),
                                            lay.stage_pairs(src_stage, dst_stage))
        return op

    def send(self, what: str, step: int, dst_stage: int, size: float, args: tuple) -> None:
        op = self.p2p(self.stage, dst_stage, size)
        # after the last compute op and the collectives it issued (the layer ends with the MLP's
        # all-reduce, whose output is what is sent)
        t = self.b.add(self.rank, Stream.PP_SEND, f"ncclSend {what}", op, [self.last_c, *self.extra], args,
                       key=("p2p", what, step, dst_stage))
        t.flow_id = t.coll_key

    def recv(self, what: str, step: int, src_stage: int, size: float, args: tuple) -> None:
        op = self.p2p(src_stage, self.stage, size)
        t = self.b.add(self.rank, Stream.PP_RECV, f"ncclRecv {what}", op,
                       [self.last_c] if self.last_c >= 0 else [], args, key=("p2p", what, step, self.stage))
        t.flow_id = t.coll_key
        self.extra.append(t.id)

    def build(self, step_end: list[int]) -> None:
        spec, s = self.spec, self.stage
        last = spec.pp - 1
        layers = spec.stage_layers()[s]
        kv_token = kv_bytes_per_token_layer(spec)
        for step in range(spec.generate_tokens):
            shape = step_shape(spec, step)
            args = (("phase", shape.phase.value), ("step", step))
            kv = spec.batch * shape.new_tokens * kv_token
            steps = self.b.intern(layer_steps(spec, shape, self.group, self.replicas))
            head = self.b.intern(head_steps(spec, shape, self.group, self.replicas)) if s == last else ()
            embed = self.b.intern(embedding_steps(spec, shape)) if s == 0 else ()
            gap = 0.0
            if self.host_gap is not None:
                gap = self.host_gap(s, step, embed + steps * len(layers) + head)
            if s == 0:
                if step > 0 and spec.pp > 1:
                    # the host's step work begins with the sampled token (the stack's step_s),
                    # so under pipelining it waits for the token the last stage sends
                    self.recv("tokens", step, last, spec.batch * TOKEN_ID_BYTES, args)
                if gap > 0:
                    self.compute("host", HostOp(gap), args)
                self.run(embed, args)
            else:
                if gap > 0:  # the host issues ahead of the hidden states it will wait for
                    self.compute("host", HostOp(gap), args)
                self.recv("hidden", step, s - 1, hidden_bytes(spec, shape), args)
            if self.granularity == "step" and layers:
                n = len(layers)
                block = Block(tuple(x.op for x in steps) * n, tuple(x.stream for x in steps) * n,
                              tuple(x.wait for x in steps) * n)
                t = self.compute("layers", block, args + (("layers", f"{layers[0]}-{layers[-1]}"),), block.kind)
                t.mem_end_bytes += kv * n
            elif self.granularity == "layer" and layers:
                block = Block(tuple(x.op for x in steps), tuple(x.stream for x in steps),
                              tuple(x.wait for x in steps))
                for layer in layers:
                    t = self.compute("layer", block, args + (("layer", layer),), block.kind)
                    t.mem_end_bytes += kv
            else:
                for layer in layers:
                    self.run(steps, args + (("layer", layer),), kv)
            if s < last:
                self.send("hidden", step, s + 1, hidden_bytes(spec, shape), args)
            else:
                end = self.run(head, args)
                step_end.append(end.id)
                if spec.pp > 1 and step + 1 < spec.generate_tokens:
                    self.send("tokens", step + 1, 0, spec.batch * TOKEN_ID_BYTES, args)


def build_inference_program(spec: InferenceSpec, node_of=lambda r: 0, local_gpu_of=lambda r: r,
                            granularity: str = "op", host_gap: HostGap | None = None) -> InferenceProgram:
    """Build the task program of one generation: the prefill and ``generate_tokens - 1`` decode
    steps.

    Parameters
    ----------
    node_of, local_gpu_of : callable
        Where a rank's GPU sits (from the topology), for the rank labels.
    granularity : {"op", "layer", "step"}
        A task per op, a block per layer and step, or a block per stage and step (see the
        module docstring).
    host_gap : callable, optional
        ``host_gap(stage, step, ops)``: the seconds the stage's GPU waits for its host before
        the step, given the ops the host issues for it in order (:mod:`sim.inference.host`);
        a positive gap becomes a ``host`` task at the head of the step. None: the host is
        always ahead.

    Examples
    --------
    >>> from sim.hardware import get_gpu
    >>> from sim.workload.spec import ModelSpec
    >>> m = ModelSpec("m", 4, 1024, 16, 16, 4096, 32000, 2048, gated_mlp=True)
    >>> ip = build_inference_program(InferenceSpec("m", m, get_gpu("A100"), tp=2, pp=2, generate_tokens=3))
    >>> len(ip.step_end_tasks), len(ip.program.ranks)
    (3, 2)
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {list(GRANULARITIES)}, got {granularity!r}")
    layout = Layout(spec.tp, 1, spec.pp)
    b = _Builder()
    step_end: list[int] = []
    infos, static = [], {}
    act = activation_bytes(spec)
    for stage in range(spec.pp):
        sp = _StageProgram(b, spec, layout, stage, granularity, host_gap)
        sp.build(step_end)
        r = sp.rank
        infos.append(RankInfo(r, node_of(r), local_gpu_of(r), 0, stage, 0))
        static[r] = weights_bytes(spec, stage) + act
    prog = Program(b.tasks, b.streams, infos, b.members, static, layout.world_size, True)
    return InferenceProgram(prog, step_end)


def phase_of(task: Task) -> Phase:
    """The phase a task belongs to (its ``phase`` argument)."""
    return Phase(task.args[0][1])

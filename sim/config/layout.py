"""A layout for a job that publishes too little of one: the smallest model parallelism that fits.

A case that leaves its data-parallel size null, and tensor or pipeline parallelism (or both)
null too, is filled with Megatron-LM's defaults: TP 1 and PP 1, every other GPU
data-parallel. A run that was published fit in its GPUs' memory and split its batch over its
data-parallel ranks, so when those defaults do not fit, or leave a published global batch
undivided, the run was not laid out that way. :func:`choose_layout` then takes the smallest
model-parallel size that fits, split as Narayanan et al. 2021 advise ("Efficient Large-Scale
Language Model Training on GPU Clusters Using Megatron-LM", SC21, Takeaway #1: tensor
parallelism up to the GPUs of one server, pipeline parallelism across servers; Takeaway #2:
model parallelism to fit the model, data parallelism over the rest), keeping whichever of TP
and PP the case published. Where the case leaves context parallelism null too, a long
sequence's split takes CP between TP and PP (:data:`MIN_CP_TOKENS`): its activations, which
pipelining does not shrink on a 1F1B pipeline's first stage, are what fills the GPU.

Sizes are tried smallest first, twice: with the recipe's defaults alone, then with the stack's
memory savers (:func:`sim.config.fit.fit_null_settings`), so that model parallelism comes
before recomputation, as the recipes that publish a layout do for the models that need one.
Tensor parallelism divides the heads and the query groups, as Megatron-Core's
``TransformerConfig`` requires, and the MLP's width, which its column-parallel linear layer
splits (``divide(output_size, world_size)``); a size whose split the loader refuses (more stages than
layers, a batch the data-parallel size does not divide) is skipped.

A mixture-of-experts case that leaves ``ep`` null and does not fit with every expert on every
GPU, memory savers and all, takes the smallest expert-parallel size that fits
(:func:`choose_expert_parallel`), for each split tried here too.

A case that publishes its data-parallel size (its model-parallel size is then fixed:
``_model_parallel_split`` in :mod:`sim.config.workload`), both TP and PP, or no GPU count,
keeps what the defaults give.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from sim.config.fit import fits_in_memory, peak_memory_bytes
from sim.errors import ConfigError
from sim.units import GiB
from sim.workload.spec import WorkloadSpec

__all__ = ["Build", "Split", "MIN_CP_TOKENS", "context_parallel_fits", "open_layout", "splits", "choose_layout",
           "expert_parallel_open", "choose_expert_parallel"]

Build = Callable[[Mapping, Path, bool], tuple[WorkloadSpec, list[str]]]
"""Builds a workload from a case mapping, with (True) or without the memory savers for its
null settings: :func:`sim.config.workload.build_workload`'s own steps."""


@dataclass(frozen=True)
class Split:
    """One model-parallel split tried (context parallelism counted in: the GPUs one data-parallel
    rank's model spans)."""

    tp: int
    pp: int
    cp: int = 1
    narrowed: bool = False
    """A narrower TP than its size's widest, traded for more CP (a long sequence, :func:`splits`)."""

    @property
    def size(self) -> int:
        return self.tp * self.cp * self.pp

    def __str__(self) -> str:
        return f"TP {self.tp}{f' x CP {self.cp}' if self.cp > 1 else ''} x PP {self.pp}"


def _mapping(raw: Mapping, key: str) -> Mapping:
    value = raw.get(key)
    return value if isinstance(value, Mapping) else {}


def open_layout(raw: Mapping) -> bool:
    """Whether the case leaves its layout to be chosen: ``dp`` null, ``tp`` or ``pp`` null, and
    the GPU count given."""
    given, system = _mapping(raw, "parallel"), _mapping(raw, "system")
    return (given.get("dp") is None and (given.get("tp") is None or given.get("pp") is None)
            and system.get("num_gpus") is not None)


MIN_CP_TOKENS = 16384
"""Context parallelism is taken only while each rank keeps at least this many tokens of a
sequence: NeMo's long-sequence recipes keep 16k-32k a rank (Llama 2 7B on DGX H100: 32k tokens
at CP 2, 128k at CP 4, 1M at CP 32; Llama 3 8B on DGX B200: 32k at CP 2, 64k at CP 4; the
``nemo-longseq`` cases), and a shorter sequence runs without it."""


def context_parallel_fits(seq: int, cp: int) -> bool:
    """Whether a sequence of ``seq`` tokens runs at context parallelism ``cp``: always at 1; above,
    where it splits into ``2 cp`` equal chunks (Megatron-Core's load-balanced halves) and each
    rank keeps at least :data:`MIN_CP_TOKENS` tokens.

    >>> context_parallel_fits(131072, 8), context_parallel_fits(8192, 2), context_parallel_fits(8192, 1)
    (True, False, True)
    """
    return cp == 1 or (seq % (2 * cp) == 0 and seq // cp >= MIN_CP_TOKENS)


def splits(total: int, per_node: int, heads: int, kv_heads: int, tp: int | None = None,
           pp: int | None = None, seq: int | None = None, ffn: int | None = None) -> Iterator[Split]:
    """The splits of ``total`` GPUs to try, smallest model-parallel size first, beyond TP 1 x PP 1:
    TP the largest divisor of the size up to ``per_node`` that divides ``per_node``, the heads, the
    query groups and (given) the MLP's width ``ffn``; then, where ``seq`` is given (context
    parallelism open), CP the largest divisor of the rest that leaves each rank
    :data:`MIN_CP_TOKENS` tokens or more and splits the sequence into ``2 CP`` equal chunks
    (Megatron-Core's load-balanced halves); PP the rest; then, of the same size, each narrower TP
    that leaves more of it to CP (widest TP first). A published ``tp`` or ``pp`` is kept.

    >>> [str(s) for s in splits(64, 8, 64, 8)][:5]
    ['TP 2 x PP 1', 'TP 4 x PP 1', 'TP 8 x PP 1', 'TP 8 x PP 2', 'TP 8 x PP 4']
    >>> [str(s) for s in splits(64, 8, 64, 4)][:3]
    ['TP 2 x PP 1', 'TP 4 x PP 1', 'TP 4 x PP 2']
    >>> [str(s) for s in splits(16, 8, 64, 8, ffn=28674)]
    ['TP 2 x PP 1', 'TP 2 x PP 2', 'TP 2 x PP 4', 'TP 2 x PP 8']
    >>> [str(s) for s in splits(64, 8, 64, 8, tp=2)][:3]
    ['TP 2 x PP 2', 'TP 2 x PP 4', 'TP 2 x PP 8']
    >>> [str(s) for s in splits(64, 8, 32, 8, seq=131072)][5:10]
    ['TP 8 x PP 1', 'TP 4 x CP 2 x PP 1', 'TP 2 x CP 4 x PP 1', 'TP 1 x CP 8 x PP 1', 'TP 8 x CP 2 x PP 1']
    """
    def divides(d: int) -> bool:
        return per_node % d == 0 and heads % d == 0 and kv_heads % d == 0 and (ffn is None or ffn % d == 0)

    def context(rest: int) -> int:
        if seq is None:
            return 1
        return max(c for c in range(1, rest + 1) if rest % c == 0 and context_parallel_fits(seq, c))

    for size in range(2, total + 1):
        if total % size:
            continue
        if tp is not None:
            if size % tp == 0 and size > tp:  # PP is open (a case that gives both is not)
                cp = context(size // tp)
                yield Split(tp, size // (tp * cp), cp)
        elif pp is not None:
            width = size // pp
            if size % pp == 0 and 1 < width <= per_node and divides(width):
                yield Split(width, pp)
        else:
            widths = [d for d in range(min(size, per_node), 0, -1) if size % d == 0 and divides(d)]
            cp = context(size // widths[0])
            yield Split(widths[0], size // (widths[0] * cp), cp)
            # then, for a long sequence, narrower TP with more of the size as CP: the activations a
            # rank keeps (and a loss over the whole vocabulary) shrink with CP, not with TP alone
            for width in widths[1:]:
                more = context(size // width)
                if more > cp:
                    cp = more
                    yield Split(width, size // (width * more), more, narrowed=True)


def choose_layout(raw: Mapping, file: Path, build: Build, spec: WorkloadSpec | None,
                  refused: str = "") -> tuple[WorkloadSpec, list[str]] | None:
    """The workload with the smallest model-parallel split that fits (module docstring), and
    its notes; None when the case's layout is not open (:func:`open_layout`) or nothing fits.

    Parameters
    ----------
    raw, file
        The case mapping and its file.
    build
        Builds a workload from a mapping (:data:`Build`).
    spec
        The workload the defaults gave, which does not fit; None when the loader refused them.
    refused
        Why the loader refused the defaults (a batch they do not divide), for the note.
    """
    if not open_layout(raw):
        return None
    given = _mapping(raw, "parallel")
    tp, pp = given.get("tp"), given.get("pp")
    probe = spec
    if probe is None:  # the model and the system, from the defaults with a batch that divides
        gpus = _mapping(raw, "system").get("num_gpus")
        probe = build({**raw, "parallel": {**given, "tp": tp or 1, "pp": pp or 1, "micro_batch_size": 1,
                                           "global_batch_size": gpus}}, file, False)[0]
    p = probe.parallel
    cp_open = given.get("cp") is None
    total = probe.system.num_gpus // (1 if cp_open else p.cp)
    per_node = probe.system.gpus_per_node
    choices = list(splits(total, per_node, probe.model.num_attention_heads, probe.model.num_kv_heads,
                          tp if isinstance(tp, int) else None, pp if isinstance(pp, int) else None,
                          probe.model.seq_length if cp_open else None, probe.model.ffn_hidden_size))
    tried: list[tuple[Split, float]] = []
    for with_savers in (False, True):
        for split in choices:
            layout = {**given, "tp": split.tp, "pp": split.pp, **({"cp": split.cp} if cp_open else {})}
            try:
                candidate, built = build({**raw, "parallel": layout}, file, with_savers)
            except ConfigError:
                continue
            if not with_savers:
                tried.append((split, peak_memory_bytes(candidate)))
            if fits_in_memory(candidate):
                return candidate, _noted(built, split, probe, spec, refused, with_savers, tp, pp, tried)
    return None


def _noted(built: list[str], split: Split, probe: WorkloadSpec, spec: WorkloadSpec | None, refused: str,
           with_savers: bool, tp: object, pp: object, tried: list[tuple[Split, float]]) -> list[str]:
    """``built`` with the notes of the chosen split before the data-parallel size's."""
    gpu = probe.system.gpu
    default = f"TP {tp or 1} and PP {pp or 1} with every other GPU data-parallel"
    short = (f"need {peak_memory_bytes(spec) / GiB:.1f} GiB a GPU, more than the {gpu.name}'s "
             f"{gpu.hbm_capacity_bytes / GiB:.1f} GiB" if spec is not None else f"leave the batch undivided: {refused}")
    why = (f"the case publishes no data-parallel size and no {'TP' if tp is None else 'PP'}"
           f"{' or PP' if tp is None and pp is None else ''}, and the defaults, {default}, {short}: the "
           f"smallest model-parallel size that fits{' with the memory savers below' if with_savers else ''}, "
           f"{split.size}, tensor parallelism up to the {probe.system.gpus_per_node} GPUs of a server, pipeline "
           "across servers (Narayanan et al. 2021, Takeaways #1 and #2)"
           f"{', for a long sequence narrower TP with more of the size as CP' if split.narrowed else ''}")
    smaller = [f"{s} {peak / GiB:.1f} GiB" for s, peak in tried if s.size < split.size]
    if smaller:
        why += "; without memory savers " + ", ".join(smaller)
    notes = []
    if tp is None:
        notes.append(f"parallel.tp: null -> {split.tp} ({why})")
    if pp is None:
        notes.append(f"parallel.pp: null -> {split.pp} ({why if tp is not None else 'with parallel.tp, above'})")
    if split.cp > 1:
        notes.append(f"parallel.cp: null -> {split.cp} (with parallel.{'tp' if tp is None else 'pp'}, above: context "
                     f"parallelism before pipelining while each rank keeps at least {MIN_CP_TOKENS:,} of the "
                     "sequence's tokens, as NeMo's long-sequence recipes do)")
    at = next((i for i, n in enumerate(built) if n.startswith("parallel.dp: null")), len(built))
    return built[:at] + notes + built[at:]


def expert_parallel_open(raw: Mapping, spec: WorkloadSpec) -> bool:
    """Whether ``raw``, built as ``spec``, is a mixture-of-experts case that leaves its
    expert-parallel size null."""
    return spec.model.is_moe and _mapping(raw, "parallel").get("ep") is None


def choose_expert_parallel(raw: Mapping, file: Path, build: Build, spec: WorkloadSpec,
                           with_savers: bool = True) -> tuple[WorkloadSpec, list[str]] | None:
    """The workload with the smallest expert-parallel size that fits, and its notes; None when
    none does.

    A mixture-of-experts case that leaves ``ep`` null gets Megatron-Core's default, 1: every
    GPU holds every expert. Where that does not fit, even with the stack's memory savers
    (:mod:`sim.config.fit`), the run that was published split its experts, as every
    mixture-of-experts recipe does (Megatron-Bridge's DeepSeek-V3, Qwen3 and Mixtral recipes
    all set ``expert_model_parallel_size``), so the sizes that divide the experts are tried
    smallest first, folded onto the stage's data- and context-parallel ranks as Megatron-Core
    folds them (a size the spec refuses is skipped): first with the recipe's defaults, then
    (``with_savers``) with the stack's memory savers, as :func:`choose_layout` tries its sizes.

    Parameters
    ----------
    raw, file
        The case mapping and its file.
    build
        Builds a workload from a mapping (:data:`Build`).
    spec
        The workload at EP 1, which does not fit.
    with_savers
        Whether the memory savers may be taken too (False: the recipe's defaults only).
    """
    given = _mapping(raw, "parallel")
    experts = spec.model.num_experts
    ranks = spec.parallel.tp * spec.parallel.cp * spec.parallel.dp
    sizes = [e for e in range(2, min(experts, ranks) + 1) if experts % e == 0 and ranks % e == 0]
    tried: list[tuple[int, float]] = []
    for savers in (False, True) if with_savers else (False,):
        for size in sizes:
            try:
                candidate, built = build({**raw, "parallel": {**given, "ep": size}}, file, savers)
            except ConfigError:
                continue
            if not savers:
                tried.append((size, peak_memory_bytes(candidate)))
            if fits_in_memory(candidate):
                gpu = spec.system.gpu
                why = (f"the {experts} experts at EP 1, every GPU holding each of them, need "
                       f"{peak_memory_bytes(spec) / GiB:.1f} GiB a GPU, more than the {gpu.name}'s "
                       f"{gpu.hbm_capacity_bytes / GiB:.1f} GiB, and no memory saver makes them fit: the smallest "
                       f"expert-parallel size that fits{' with the memory savers below' if savers else ''}, carved "
                       "out of the data- and context-parallel ranks as Megatron-Core does")
                smaller = [f"EP {e} {peak / GiB:.1f} GiB" for e, peak in tried if e < size]
                if smaller:
                    why += "; without memory savers " + ", ".join(smaller)
                at = next((i for i, n in enumerate(built) if n.startswith(("parallel.etp:", "parallel.dp: null"))),
                          len(built))
                return candidate, built[:at] + [f"parallel.ep: null -> {size} ({why})"] + built[at:]
    return None

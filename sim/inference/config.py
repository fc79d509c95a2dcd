"""The command-line boundary of inference: flags in, an :class:`InferenceSpec` and a topology out.

Every bad value raises a :class:`~sim.errors.ConfigError` naming the flag, what was expected
and what arrived; enums are parsed here and nowhere below.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.config import default_topology_name, load_topology
from sim.config.fields import comma_items
from sim.errors import ConfigError
from sim.hardware import GPUSpec, get_gpu, gpu_names
from sim.inference.models import load_model
from sim.inference.spec import KV_DTYPES, InferenceSpec, Phase
from sim.topology.spec import TopologySpec
from sim.types import NOT_SIMULATED_DTYPES, SIMULATED_DTYPES, Dtype, parse_enum

__all__ = ["InferenceArgs", "parse_gpu", "parse_gpus", "parse_phases", "build_spec"]

_FLAG_OF = {"tp": "--tp", "pp": "--pp", "batch": "--batch", "prompt_tokens": "--prompt",
            "generate_tokens": "--generate", "dtype": "--dtype", "kv_dtype": "--kv-dtype"}


@dataclass(frozen=True)
class InferenceArgs:
    """The flags ``llmsim infer``, ``roofline`` and ``whatif memory`` share, as given."""

    model: str | None = None
    gpu: str = "H100-SXM5-80GB"
    tp: int = 1
    pp: int = 1
    batch: int = 1
    prompt: int = 200
    generate: int = 200
    dtype: str = "bf16"
    kv_dtype: str | None = None
    topology: str | None = None


def parse_gpu(name: str, flag: str = "--gpu") -> GPUSpec:
    try:
        return get_gpu(name.strip())
    except KeyError:
        raise ConfigError(f"<{flag}>", flag, f"one of {gpu_names()} (or A100, H100)", name) from None


def parse_gpus(text: str, flag: str = "--gpu") -> list[GPUSpec]:
    """``"A100,H100-SXM5-80GB"`` -> GPUs, in order, without repeats."""
    out: list[GPUSpec] = []
    for item in comma_items(text, flag, "comma-separated GPU names", repeats=True):
        g = parse_gpu(item, flag)
        if g not in out:  # A100 and A100-SXM4-80GB name one GPU
            out.append(g)
    return out


PHASE_CHOICES = tuple(p.value for p in Phase) + ("both",)
"""What ``roofline --phase`` takes: a phase, several comma-separated, or ``both``."""


def parse_phases(text: str) -> tuple[Phase, ...]:
    """``--phase``: comma-separated phases, ``both`` for every one.

    >>> [p.value for p in parse_phases("both")], [p.value for p in parse_phases("decode")]
    (['prefill', 'decode'], ['decode'])
    """
    out: list[Phase] = []
    for item in text.split(","):
        item = item.strip()
        if item and item not in PHASE_CHOICES:
            raise ConfigError("<--phase>", "--phase", f"one of {', '.join(PHASE_CHOICES)} (or several, "
                              "comma-separated)", item)
        for p in (list(Phase) if item == "both" else [Phase(item)] if item else []):
            if p not in out:
                out.append(p)
    if not out:
        raise ConfigError("<--phase>", "--phase", f"one of {', '.join(PHASE_CHOICES)}", text)
    return tuple(out)


def topology_for(gpu: GPUSpec, name: str | None) -> TopologySpec:
    """The topology given, or the GPU's usual DGX/NVL preset."""
    return load_topology(name or default_topology_name(gpu.name))


def build_spec(a: InferenceArgs, gpu: GPUSpec | None = None) -> tuple[InferenceSpec, TopologySpec, list[str]]:
    """The spec and topology the flags describe, and notes on what was defaulted.

    >>> spec, topo, _ = build_spec(InferenceArgs("llama2-70b", "A100", tp=8))
    >>> spec.name, spec.num_gpus, topo.name
    ('llama2-70b', 8, 'dgx-a100')
    """
    name, model, notes = load_model(a.model)
    gpu = gpu or parse_gpu(a.gpu)
    dtype = parse_enum(Dtype, a.dtype, "<--dtype>", "--dtype", SIMULATED_DTYPES, NOT_SIMULATED_DTYPES)
    if a.kv_dtype is None:
        kv = Dtype.BF16 if dtype not in (Dtype.BF16, Dtype.FP16) else dtype
        if kv is not dtype:
            notes.append(f"--kv-dtype: none given -> {kv.value} (TensorRT-LLM keeps the KV cache in 16 bits unless "
                         "--kv_cache_dtype fp8 is given)")
    else:
        kv = parse_enum(Dtype, a.kv_dtype, "<--kv-dtype>", "--kv-dtype", KV_DTYPES)
    topo = topology_for(gpu, a.topology)
    try:
        spec = InferenceSpec(name, model, gpu, a.tp, a.pp, a.batch, a.prompt, a.generate, dtype, kv,
                             topo.gpus_per_node)
    except ConfigError as exc:
        flag = _FLAG_OF.get(exc.field, exc.field)
        raise ConfigError(f"<{flag}>", flag, exc.expected, exc.got) from None
    if a.topology is None:
        notes.append(f"topology: none given -> {topo.name} (the usual one for {gpu.name})")
    if a.prompt + a.generate > model.seq_length:
        notes.append(f"--prompt {a.prompt} + --generate {a.generate} tokens exceed the model's context of "
                     f"{model.seq_length} (model.seq_length): simulated as given, as a model extended to it")
    return spec, topo, notes

"""``llmsim whatif memory``: the same GPU with another HBM generation, and what it does to latency.

The seed paper (BanaGozar et al., arXiv 2407.14645, Sec. 6) studies the "impact of DRAM memory
technology scaling on inference latency". Here a GPU keeps everything but its memory: the
generation's per-stack bandwidth and capacity come from a documented table
(``topologies/hbm-generations.yaml``), applied by the rule stated there (same stack count, same
fraction of the rated speed), and the inference is simulated again on each.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sim.config.fields import Fields, read_yaml
from sim.config.presets import resolve_preset
from sim.errors import ConfigError
from sim.hardware import GPUSpec
from sim.inference.report import make_inference_report
from sim.inference.runner import simulate_inference
from sim.inference.spec import InferenceSpec
from sim.topology.spec import TopologySpec
from sim.units import GB, GBPS, GiB, byte_count

__all__ = ["HBM_TABLE", "HBMGeneration", "HBMTable", "load_hbm_table", "with_hbm", "MemoryRow", "memory_whatif",
           "format_memory_whatif", "STACK_BANDWIDTH_GBPS", "STACK_CAPACITY_GB", "MAX_STACKS"]

HBM_TABLE = "hbm-generations"
"""The table's preset name in ``topologies/``."""

STACK_BANDWIDTH_GBPS = (1.0, 100_000.0)
"""The per-stack bandwidths (GB/s) the table takes, both ends included. The slowest stack ever
built, first-generation HBM (JEDEC JESD235, 2013: 1 Gb/s x 1024 bits = 128 GB/s; AMD Radeon R9
Fury X, 4 stacks, 512 GB/s), is 128 times the lower end; the fastest standard, HBM4 (JEDEC
JESD270-4, April 2025: 8 Gb/s x 2048 bits = 2 TB/s, the table's ``sources``), is a fiftieth of
the upper one. Outside them a GPU moved to the generation runs at a rate no memory has (at
1e308 GB/s a stack's bytes per second overflow to infinity, the other generations' share of it
is 0 and a kernel's time divides by zero)."""

STACK_CAPACITY_GB = (0.1, 10_000.0)
"""The per-stack capacities (GB) the table takes, both ends included: a tenth of the smallest
stack built (HBM1, 1 GB: the Fury X's 4 GB in 4 stacks) up to 150 times the largest the newest
standard allows (HBM4: 16-high stacks of 32 Gb dies, 64 GB; JEDEC JESD270-4, the table's
``sources``)."""

MAX_STACKS = 64
"""The most HBM stacks a table's GPU may have: the largest built carry 8 (B200, GB200, GB300;
the table's ``gpus``) and the largest announced 16 (NVIDIA's Rubin Ultra, GTC 2025 roadmap)."""


@dataclass(frozen=True)
class HBMGeneration:
    name: str
    stack_bandwidth_bytes_per_s: float
    stack_capacity_bytes: float


@dataclass(frozen=True)
class HBMTable:
    """Generations by name, and each catalogue GPU's own generation, stacks and stack size."""

    path: str
    generations: dict[str, HBMGeneration]
    gpus: dict[str, tuple[str, int, float]]
    """GPU name -> (generation, stacks, stack capacity in bytes)."""

    def own(self, gpu: GPUSpec) -> tuple[HBMGeneration, int, float]:
        try:
            gen, stacks, cap = self.gpus[gpu.name]
        except KeyError:
            raise ConfigError(self.path, "gpus", f"an entry for {gpu.name}", None) from None
        return self.generations[gen], stacks, cap

    def generation(self, name: str, where: str = "--hbm") -> HBMGeneration:
        for key, g in self.generations.items():
            if key.lower() == name.strip().lower():
                return g
        raise ConfigError(f"<{where}>", where, f"one of {list(self.generations)}", name)


def load_hbm_table(path: str | None = None) -> HBMTable:
    """Read the HBM table (``topologies/hbm-generations.yaml`` unless ``path`` is given).

    The table has three keys, and no others:

    ``generations``
        A mapping of generation names (text, each once in any case: ``--hbm`` reads them in any
        case) to ``{stack_bandwidth_GBps, stack_capacity_GB}``, both required: a stack's
        bandwidth in GB/s, within :data:`STACK_BANDWIDTH_GBPS` (1 to 100,000), and its
        capacity in GB, within :data:`STACK_CAPACITY_GB` (0.1 to 10,000).
    ``gpus``
        A mapping of GPUs of the catalogue (:func:`sim.hardware.get_gpu`'s names, each GPU once
        whatever name it goes by) to ``{generation, stacks, stack_capacity_GB}``: the
        generation it ships with (one of ``generations``), its stack count (1 to
        :data:`MAX_STACKS`) and, when its stacks differ from the generation's, their capacity
        (within :data:`STACK_CAPACITY_GB`).
    ``sources``
        Text: where the figures come from.

    No real or announced part is near the bounds (see each constant); they keep a typo or a
    generated file from producing a GPU with absurd memory, or from dividing by zero.

    Parameters
    ----------
    path : str, optional
        A YAML file or a preset name of ``topologies/``.

    Returns
    -------
    HBMTable
        Its ``gpus`` keyed by the catalogue's canonical GPU names.

    Raises
    ------
    ConfigError
        For anything else, naming the file and the field.

    >>> t = load_hbm_table()
    >>> list(t.generations), t.gpus["H100-SXM5-80GB"][:2]
    (['HBM2e', 'HBM3', 'HBM3e', 'HBM4'], ('HBM3', 5))
    """
    file = resolve_preset(path or HBM_TABLE, "topologies")
    where = str(file)
    top = Fields(read_yaml(file), where, "", ("generations", "gpus", "sources"))
    top.text("sources")
    raw_gens = top.raw.get("generations")
    if not isinstance(raw_gens, Mapping) or not raw_gens:
        raise top.error("generations", "a mapping of generation names to their stacks", raw_gens)
    lo_bw, hi_bw = STACK_BANDWIDTH_GBPS
    lo_cap, hi_cap = STACK_CAPACITY_GB
    bw_what = f"a stack's bandwidth in GB/s, from {lo_bw:,g} to {hi_bw:,g}"
    cap_what = f"a stack's capacity in GB, from {lo_cap:,g} to {hi_cap:,g}"
    gens: dict[str, HBMGeneration] = {}
    for name, entry in raw_gens.items():
        if not isinstance(name, str) or not name.strip():
            raise top.error(f"generations.{name}", "a generation name, e.g. HBM3e", name)
        same = next((g for g in gens if g.lower() == name.strip().lower()), None)
        if same is not None:
            raise top.error(f"generations.{name}", f"each generation once, in any case ({same!r} is there)", name)
        f = Fields(entry, where, f"generations.{name}", ("stack_bandwidth_GBps", "stack_capacity_GB"))
        bw = f.quantity("stack_bandwidth_GBps", bw_what, low=lo_bw, high=hi_bw, required=True)
        cap = f.quantity("stack_capacity_GB", cap_what, low=lo_cap, high=hi_cap, required=True)
        gens[name] = HBMGeneration(name, bw * GBPS, cap * GB)
    raw_gpus = top.raw.get("gpus")
    if not isinstance(raw_gpus, Mapping) or not raw_gpus:
        raise top.error("gpus", "a mapping of GPU names to {generation, stacks}", raw_gpus)
    gpus: dict[str, tuple[str, int, float]] = {}
    given: dict[str, object] = {}
    for name, entry in raw_gpus.items():
        gpu = top.catalogue_gpu(f"gpus.{name}", name)
        if gpu in given:
            raise top.error(f"gpus.{name}", f"each GPU once ({given[gpu]!r} names {gpu} too)", name)
        given[gpu] = name
        f = Fields(entry, where, f"gpus.{name}", ("generation", "stacks", "stack_capacity_GB"))
        gen = f.text("generation", required=True)
        if gen not in gens:
            raise f.error("generation", f"one of {list(gens)}", gen)
        stacks = f.integer("stacks", required=True, positive=True)
        if stacks > MAX_STACKS:
            raise f.error("stacks", f"a stack count from 1 to {MAX_STACKS}", stacks)
        own_cap = f.quantity("stack_capacity_GB", cap_what, low=lo_cap, high=hi_cap)
        gpus[gpu] = (gen, stacks, gens[gen].stack_capacity_bytes if own_cap is None else own_cap * GB)
    return HBMTable(where, gens, gpus)


def with_hbm(gpu: GPUSpec, generation: HBMGeneration, table: HBMTable) -> GPUSpec:
    """``gpu`` with its memory replaced by ``generation`` (the table's rule).

    >>> from sim.hardware import get_gpu
    >>> t = load_hbm_table()
    >>> g = with_hbm(get_gpu("H100"), t.generation("HBM4"), t)
    >>> round(g.hbm_bandwidth_bytes_per_s / 1e12, 2), round(g.hbm_capacity_bytes / 2**30)
    (8.38, 179)
    >>> with_hbm(get_gpu("H100"), t.generation("HBM3"), t) == get_gpu("H100")
    True
    """
    own, _stacks, own_cap = table.own(gpu)
    if generation == own:
        return gpu
    bw = gpu.hbm_bandwidth_bytes_per_s * generation.stack_bandwidth_bytes_per_s / own.stack_bandwidth_bytes_per_s
    cap = gpu.hbm_capacity_bytes * generation.stack_capacity_bytes / own_cap
    return dataclasses.replace(gpu, name=f"{gpu.name}+{generation.name}", hbm_bandwidth_bytes_per_s=bw,
                               hbm_capacity_bytes=cap)


@dataclass(frozen=True)
class MemoryRow:
    """One generation: the GPU's memory and the simulated latencies."""

    generation: str
    own: bool
    hbm_bandwidth_bytes_per_s: float
    hbm_capacity_bytes: float
    ttft_s: float
    tpot_s: float
    e2e_latency_s: float
    fits: bool

    def to_dict(self) -> dict:
        return {"generation": self.generation, "own": self.own,
                "hbm_bandwidth_bytes_per_s": self.hbm_bandwidth_bytes_per_s,
                "hbm_capacity_bytes": byte_count(self.hbm_capacity_bytes), "ttft_s": self.ttft_s, "tpot_s": self.tpot_s,
                "e2e_latency_s": self.e2e_latency_s, "fits": self.fits}


def memory_whatif(spec: InferenceSpec, topology: TopologySpec, generations: Sequence[str] | None = None,
                  table: HBMTable | None = None, granularity: str = "layer") -> list[MemoryRow]:
    """Simulate ``spec`` with its GPU's memory swapped for each generation (default: all of the
    table's, in its order)."""
    table = table or load_hbm_table()
    own = table.own(spec.gpu)[0]
    gens = [table.generation(g) for g in generations] if generations else list(table.generations.values())
    rows = []
    for g in gens:
        gpu = with_hbm(spec.gpu, g, table)
        rep = make_inference_report(simulate_inference(dataclasses.replace(spec, gpu=gpu), topology,
                                                       granularity=granularity))
        rows.append(MemoryRow(g.name, g == own, gpu.hbm_bandwidth_bytes_per_s,
                              gpu.hbm_capacity_bytes, rep.ttft_s, rep.tpot_s, rep.e2e_latency_s,
                              rep.fits_in_memory))
    return rows


def format_memory_whatif(spec: InferenceSpec, rows: list[MemoryRow]) -> str:
    """The printed table: per generation, the memory, the latencies and each one's change
    against the GPU's own generation (or the first row when the GPU's own is not listed)."""
    base = next((r for r in rows if r.own), rows[0])
    lines = [f"llmsim whatif memory: {spec.name} on {spec.num_gpus} x {spec.gpu.name}, TP {spec.tp} PP {spec.pp}, "
             f"batch {spec.batch}, prompt {spec.prompt_tokens}, generate {spec.generate_tokens}, {spec.dtype.value}",
             f"  baseline: {base.generation}{' (the GPU' + chr(39) + 's own)' if base.own else ''}", "",
             "  HBM      TB/s    GiB   TTFT ms  change   TPOT ms  change   e2e s   change  fits"]

    def pct(x: float, y: float) -> str:
        return f"{(x / y - 1) * 100:+6.1f}%" if y > 0 else "     -"

    for r in rows:
        lines.append(f"  {r.generation:<6} {r.hbm_bandwidth_bytes_per_s / 1e12:>6.2f} "
                     f"{r.hbm_capacity_bytes / GiB:>6.0f} "
                     f"{r.ttft_s * 1e3:>9.3f} {pct(r.ttft_s, base.ttft_s)} {r.tpot_s * 1e3:>9.3f} "
                     f"{pct(r.tpot_s, base.tpot_s)} {r.e2e_latency_s:>7.4f} {pct(r.e2e_latency_s, base.e2e_latency_s)}"
                     f"  {'yes' if r.fits else 'NO'}")
    return "\n".join(lines)

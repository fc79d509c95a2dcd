"""Which topology a workload runs on, and whose GPU: one rule for every command.

A topology file may fix its GPU (``gpu:`` in ``topologies/*.yaml``: ``dgx-a100`` an
A100-SXM4-80GB, ``dgx-b200`` a B200, ``gb200-nvl72`` a GB200; ``null`` where several GPUs share
the links, as ``dgx-h100``). :func:`place_workload` applies the rule:

1. No topology named: the workload's ``system.topology``, else its GPU's usual preset
   (:func:`sim.config.default_topology_name`), with a note.
2. A topology named on the command line (``run --topology``, each of ``compare``'s, ``sweep
   --topology``) that fixes a GPU brings it: that GPU replaces the workload's, with a note
   (``topology dgx-b200 fixes its GPU: B200 replaces the workload's A100-SXM4-80GB``). What
   follows the GPU follows it: compute, HBM bandwidth and capacity (so whether each stage fits),
   NVLink, the number formats it has tensor cores for (an error if the workload's is not one of
   them) and GPUs per node (the topology's).
3. A GPU named on the command line as well (``--set system.gpu=NAME``) stands: the two options
   say different things and the GPU option is the narrower one, so the workload's GPU runs on
   the topology's links, with a note.
4. A topology the workload file names itself (``system.topology``) does not replace the file's
   own ``system.gpu``: both are explicit in the same file, and a different GPU is noted as run
   on the topology's links (as 3).

In every case the topology's ``gpus_per_node`` is the one simulated, noted when the
workload's differs.

A workload that names no topology runs on its GPU's usual preset built with nodes of its
``system.gpus_per_node`` where the preset's NVLink domain is the node (:func:`node_sized`), and a
workload whose ``system.nvlink_segments`` is true (its stack's launch scripts) on domains of the
segments Slurm's ``--segment`` gives it (:func:`segmented`), each with a note.

The workload's published network (``system.network``) is put on the topology it names
itself or on its GPU's usual one (rules 1 and 4; :func:`sim.topology.network.apply_network`),
with a note where it changes the topology or is modelled by another fabric's figures: the
case's network overrides its GPU's default system. A topology named on the
command line stands as it is, the network noted as not applied where it would change it: that
option asks for those links (``compare`` runs one workload on several). ``whatif generations``
applies the same rule to ``--from``/``--from-topology``
and ``--to``/``--to-topology`` (:func:`choose_gpu`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from sim.errors import ConfigError
from sim.topology.network import NetworkSpec, apply_network
from sim.topology.spec import TopologySpec
from sim.workload.spec import SystemSpec, WorkloadSpec

__all__ = ["Placed", "choose_gpu", "gpu_given", "node_sized", "on_system", "place_workload", "segmented"]


@dataclass(frozen=True)
class Placed:
    """A workload and the topology it runs on, its GPU chosen by :func:`place_workload`."""

    workload: WorkloadSpec
    topology: TopologySpec


def gpu_given(overrides: Sequence[str] | None) -> bool:
    """Whether ``--set`` items name the GPU (``system.gpu=NAME``).

    >>> gpu_given(["parallel.tp=2", "system.gpu=H100"]), gpu_given(None)
    (True, False)
    """
    return any(str(item).partition("=")[0].strip() == "system.gpu" for item in overrides or ())


def choose_gpu(gpu: str, topology: TopologySpec, *, topology_given: bool, gpu_named: bool,
               gpu_option: str = "--set system.gpu=NAME", whose: str = "the workload's") -> tuple[str, str | None]:
    """The GPU simulated on ``topology`` for a workload on ``gpu`` (canonical names), and the
    note that says so (None when the two agree), under the module's rule; ``gpu_option`` (the
    option that would keep ``gpu``) and ``whose`` (whose GPU it is) are for the note.

    >>> from sim.config import load_topology
    >>> choose_gpu("A100-SXM4-80GB", load_topology("dgx-b200"), topology_given=True, gpu_named=False)[0]
    'B200'
    >>> choose_gpu("A100-SXM4-80GB", load_topology("dgx-b200"), topology_given=True, gpu_named=True)[0]
    'A100-SXM4-80GB'
    """
    if topology.gpu is None or topology.gpu == gpu:
        return gpu, None
    if topology_given and not gpu_named:
        return topology.gpu, (f"topology {topology.name} fixes its GPU: {topology.gpu} replaces {whose} "
                              f"{gpu} ({gpu_option} keeps a GPU on its links)")
    return gpu, f"topology {topology.name} is described with {topology.gpu}; {whose} {gpu} is simulated on its links"


def place_workload(workload: WorkloadSpec, topology: str | TopologySpec | None, notes: list[str], *,
                   option: str = "--topology", gpu_named: bool = False) -> Placed:
    """The workload on ``topology`` (a name, a file, a loaded spec, or None: the workload's own
    or its GPU's usual one) under the module's rule; notes are appended to ``notes``.

    Parameters
    ----------
    option : str
        The option that named ``topology``, for notes and errors.
    gpu_named : bool
        Whether the GPU was also named on the command line (:func:`gpu_given`): it then stands.

    Raises
    ------
    ConfigError
        When the topology's GPU has no tensor cores for the workload's number format, or no
        power model for the workload's ``system.power_limit_w``.
    """
    from sim.config import default_topology_name, load_topology

    gpu = workload.system.gpu
    given = topology is not None
    if topology is None:
        topology = workload.system.topology
        if topology is None:
            topology = default_topology_name(gpu.name)
            notes.append(f"topology: none given -> {topology} (the default for {gpu.name})")
    topo = topology if isinstance(topology, TopologySpec) else load_topology(topology)
    network = workload.system.network
    if network is not None and given and _changes(topo, network):
        notes.append(f"system.network: {network.describe()} not applied: {option} {topo.name} stands as it "
                     "is (--set system.topology=NAME puts the network on NAME)")
    topo = on_system(topo, workload.system, own=not given, notes=notes)
    chosen, note = choose_gpu(gpu.name, topo, topology_given=given, gpu_named=gpu_named)
    if chosen != gpu.name:
        workload = _with_gpu(workload, topo, option)
    if note:
        notes.append(note)
    if topo.gpus_per_node != workload.system.gpus_per_node:
        notes.append(f"system.gpus_per_node: the workload says {workload.system.gpus_per_node}, "
                     f"topology {topo.name} has {topo.gpus_per_node}; the topology's is used")
    return Placed(workload, topo)


def on_system(topo: TopologySpec, system: SystemSpec, *, own: bool, notes: list[str] | None = None) -> TopologySpec:
    """``topo`` as the workload whose ``system`` runs on it sees it, the notes appended to
    ``notes``: built with nodes of its ``gpus_per_node`` (:func:`node_sized`) and carrying its
    published network (:func:`~sim.topology.network.apply_network`) where ``topo`` is its own
    (the one it names, or its GPU's usual preset when it names none: ``own``; one named on the
    command line stands), the nodes only for the usual preset; then placed in the launch
    segments its stack uses (:func:`segmented`), on any topology."""
    changes: list[tuple[TopologySpec, str | None]] = []
    if own and system.topology is None:
        changes.append(node_sized(topo, system.gpus_per_node))
        topo = changes[-1][0]
    if own and system.network is not None:
        applied = apply_network(topo, system.network)
        changes.append((applied.topology, applied.note))
        topo = applied.topology
    if system.nvlink_segments:
        changes.append(segmented(topo, system.num_gpus))
        topo = changes[-1][0]
    if notes is not None:
        notes.extend(note for _, note in changes if note)
    return topo


def node_sized(topo: TopologySpec, gpus_per_node: int) -> tuple[TopologySpec, str | None]:
    """The GPU's usual preset ``topo`` built with nodes of ``gpus_per_node`` GPUs, and a note;
    ``topo`` and None where it has that many already, or where its NVLink domain is not the node
    (an NVL72 rack, a fixed size, a GraphML file), which stands as it is.

    A workload that says its nodes hold another number of GPUs than the preset (the 4-GPU
    A100 boards of Perlmutter, Polaris or JUWELS Booster against the DGX A100's 8) runs on
    nodes of that many: an NVLink domain of the node, each GPU with the preset's NVLink
    bandwidth, and the preset's NICs per GPU.

    >>> from sim.config import load_topology
    >>> t, note = node_sized(load_topology("dgx-a100"), 4)
    >>> t.gpus_per_node, t.scale_up.domain_size, t.scale_out.nics_per_node
    (4, 4, 4)
    """
    gpn, up, out = topo.gpus_per_node, topo.scale_up, topo.scale_out
    if gpus_per_node == gpn or up.domain_size != gpn or topo.num_gpus is not None or topo.graph_file is not None:
        return topo, None
    nics = max(1, round(out.nics_per_node * gpus_per_node / gpn))
    out = dataclasses.replace(out, nics_per_node=nics, planes=math.gcd(out.planes, nics))
    sized = dataclasses.replace(topo, gpus_per_node=gpus_per_node, scale_out=out,
                                scale_up=dataclasses.replace(up, domain_size=gpus_per_node))
    return sized, (f"system.gpus_per_node: {gpus_per_node} -> {topo.name} built with nodes of {gpus_per_node} GPUs "
                   f"(of {gpn}): an NVLink domain of {gpus_per_node}, {nics} NICs per node")


def segmented(topo: TopologySpec, num_gpus: int) -> tuple[TopologySpec, str | None]:
    """``topo`` with a job of ``num_gpus`` GPUs placed in equal segments of nodes, each inside
    one NVLink domain, and a note; ``topo`` and None where that changes nothing.

    NeMo's and Megatron-Bridge's performance scripts launch a job of more nodes than an NVLink
    domain holds with Slurm's ``--segment`` set to the largest divisor of its node count that a
    domain holds, 18 GB200 trays ("add --segment flag to sbatch if job uses GB200 and goes
    beyond one rack": NVIDIA/NeMo ``scripts/performance/utils.py`` @ v2.3.0, later
    ``scripts/performance/executors.py``; NVIDIA-NeMo/Megatron-Bridge
    ``scripts/performance/utils/executors.py`` @ 067f987df), so
    each rack holds a whole segment: 64 trays run as four domains of 16, not three of 18 and
    one of 10. The job then sees domains of ``segment x gpus_per_node`` GPUs (and, where the
    topology puts one leaf under a domain, a leaf per segment).

    >>> from sim.config import load_topology
    >>> t, note = segmented(load_topology("gb200-nvl72"), 256)
    >>> t.scale_up.domain_size, t.scale_out.nodes_per_leaf
    (64, 16)
    >>> segmented(load_topology("gb200-nvl72"), 72)[1] is None
    True
    """
    gpn, dom = topo.gpus_per_node, topo.scale_up.domain_size
    per_domain = dom // gpn
    nodes = -(-num_gpus // gpn)
    if topo.graph_file is not None or per_domain <= 1 or nodes <= per_domain:
        return topo, None
    segment = max(d for d in range(1, per_domain + 1) if nodes % d == 0)
    if segment == per_domain:
        return topo, None
    up = dataclasses.replace(topo.scale_up, domain_size=segment * gpn)
    out = topo.scale_out
    if out.nodes_per_leaf == per_domain:
        out = dataclasses.replace(out, nodes_per_leaf=segment)
    note = (f"system.nvlink_segments: {nodes} nodes in segments of {segment} (the largest divisor of the node "
            f"count that a {per_domain}-node NVLink domain holds, Slurm --segment): {topo.name}'s domains of "
            f"{dom} GPUs run as domains of {segment * gpn}")
    return dataclasses.replace(topo, scale_up=up, scale_out=out), note


def _changes(topo: TopologySpec, network: NetworkSpec) -> bool:
    """Whether ``network`` would change ``topo`` (or cannot be put on it)."""
    try:
        return apply_network(topo, network).topology != topo
    except ConfigError:
        return True


def _with_gpu(workload: WorkloadSpec, topo: TopologySpec, option: str) -> WorkloadSpec:
    """``workload`` on ``topo``'s GPU and nodes, checked for what the GPU must support."""
    from sim.hardware import get_gpu, power_limited

    old, new = workload.system.gpu, get_gpu(topo.gpu)
    if not new.supports(workload.dtype):
        have = ", ".join(d.value for d, _ in new.peak_flops_per_s)
        raise ConfigError(f"<{option}>", option, f"a topology whose GPU runs the workload's {workload.dtype.value} "
                          f"({topo.name} fixes {new.name}, whose tensor cores take {have}; --set dtype=FORMAT, "
                          f"or --set system.gpu=NAME to keep the workload's GPU on its links)", topo.name)
    rated = get_gpu(old.name).power
    if old.power is not None and rated is not None and old.power.limit_w != rated.limit_w:
        try:
            new = power_limited(new, old.power.limit_w)
        except ValueError as exc:
            raise ConfigError(f"<{option}>", option, f"a topology whose GPU takes the workload's "
                              f"system.power_limit_w={old.power.limit_w:g} ({topo.name} fixes {new.name}; {exc})",
                              topo.name) from None
    system = dataclasses.replace(workload.system, gpu=new, gpus_per_node=topo.gpus_per_node)
    return dataclasses.replace(workload, system=system)

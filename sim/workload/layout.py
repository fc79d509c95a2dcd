"""Where each rank sits: Megatron-LM's rank order and the communication groups.

Megatron-LM orders ranks ``tp-cp-ep-dp-pp`` (TP innermost): ``rank = tp + TP (cp + CP (dp +
DP pp))`` (``megatron/core/parallel_state.py``, default ``order="tp-cp-ep-dp-pp"``), so a TP
group sits inside a node and pipeline stages are farthest apart. Context-parallel ranks hold
the same weights, so their gradients are reduced together with the data-parallel ones (the
``dp-cp`` group): here the ``dp`` coordinate runs over both, ``dp = cp + CP dp_pure``, and a CP
group is a block of ``CP`` consecutive ``dp`` coordinates.

Hybrid sharding (``parallel.dp_shard``): the ``dp`` coordinates of a stage are
``dp_replicate`` replicas of a shard group of ``dp / dp_replicate`` *consecutive* coordinates
(with the CP ranks inside them). Megatron-Core slices each ``dp-cp`` group into its
intra-instance groups the same way (``ranks_with_cp[i * intra : (i + 1) * intra]``), and
torchtitan's mesh puts ``dp_replicate`` outside ``dp_shard``, ``cp`` and ``tp``. Under the
default order a shard group is then ``dp_shard x cp x tp`` consecutive GPUs: inside a node (or
an NVLink domain, a leaf) when that product fits, its replicas across nodes.

Ranks are logical: which GPU each one runs on is the workload's ``parallel.placement``
(:func:`gpu_placement`), applied once, by :class:`sim.topology.routing.Fabric`.

Expert groups: with the experts at the attention's TP degree (``etp`` unset or ``tp``) and
``ep`` dividing the data-parallel degree, an EP group is a block of ``ep`` data-parallel
coordinates (EP carved out of DP). With another expert tensor-parallel degree, or an ``ep``
that only divides the data- and context-parallel ranks together, Megatron-Core's expert rank
generator (MoE parallel folding, Liu et al. 2025, arXiv 2504.14960;
``initialize_model_parallel``'s ``expert_decoder_rank_generator``, a ``RankGenerator(tp=etp,
ep=ep, dp=edp, cp=1)`` over the same ranks and order) numbers each stage's ranks again as
``r = etp + ETP (ep + EP edp)``, so EP groups may span TP and CP ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import permutations

from sim.workload.spec import ParallelSpec, placement_digits

__all__ = ["Layout", "gpu_placement", "order_placements"]


_FAMILIES_KEPT = 1024
"""Group families (every group of one kind in a stage) each :class:`Layout` method keeps: the
program builder and the planner ask for the same ones many times."""


@dataclass(frozen=True)
class Layout:
    """Rank <-> (tp, dp, pp) coordinates and the groups that follow; ``dp`` counts the data
    and context-parallel ranks together (``cp`` of them per CP group)."""

    tp: int
    dp: int
    pp: int
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    """The experts' tensor-parallel degree; None: ``tp``."""
    dp_replicate: int = 1
    """Replicas of a ZeRO/FSDP shard group among the ``dp`` coordinates (hybrid sharding)."""

    @classmethod
    def of(cls, parallel: ParallelSpec) -> Layout:
        return cls(parallel.tp, parallel.dp * parallel.cp, parallel.pp, parallel.cp, parallel.ep, parallel.etp,
                   parallel.dp_replicate)

    @property
    def folded(self) -> bool:
        """Whether the expert groups come from :meth:`expert_coords` (MoE parallel folding): the
        experts run at another TP degree than the attention, or ``ep`` does not divide the
        data-parallel degree (its groups then span context-parallel ranks).

        >>> Layout(1, 16, 1, cp=4, ep=8).folded, Layout(1, 16, 1, cp=2, ep=8).folded
        (True, False)
        """
        return (self.etp is not None and self.etp != self.tp) or (self.ep > 1 and (self.dp // self.cp) % self.ep != 0)

    def expert_coords(self, tp: int, dp: int) -> tuple[int, int, int]:
        """(etp, ep, edp) of the rank at (tp, dp) of a stage under MoE parallel folding: its
        index in the stage, ``tp + TP dp``, read as ``etp + ETP (ep + EP edp)``
        (Megatron-Core's expert ``RankGenerator``, order ``tp-ep-dp`` with ``cp=1``).

        >>> Layout(2, 8, 1, ep=4, etp=1).expert_coords(1, 2)
        (0, 1, 1)
        """
        etp = self.tp if self.etp is None else self.etp
        i = tp + self.tp * dp
        return i % etp, i // etp % self.ep, i // (etp * self.ep)

    def _expert_rank(self, etp_c: int, ep_c: int, edp_c: int, pp: int) -> int:
        etp = self.tp if self.etp is None else self.etp
        return etp_c + etp * (ep_c + self.ep * edp_c) + self.tp * self.dp * pp

    def etp_group(self, tp: int, dp: int, pp: int) -> tuple[int, ...]:
        """The experts' tensor-parallel group of the rank at (tp, dp, pp): its TP group unless
        folded, else ``etp`` consecutive ranks of the stage.

        >>> Layout(4, 2, 1, ep=4, etp=2).etp_group(3, 1, 0)
        (6, 7)
        """
        if not self.folded:
            return self.tp_group(dp, pp)
        _, e, d = self.expert_coords(tp, dp)
        return tuple(self._expert_rank(t, e, d, pp) for t in range(self.tp if self.etp is None else self.etp))

    @lru_cache(maxsize=_FAMILIES_KEPT)
    def etp_groups(self, pp: int) -> tuple[tuple[int, ...], ...]:
        """Every expert tensor-parallel group of stage ``pp`` (the TP groups unless folded)."""
        if not self.folded:
            return self.tp_groups(pp)
        return tuple(dict.fromkeys(self.etp_group(t, d, pp) for d in range(self.dp) for t in range(self.tp)))

    @property
    def world_size(self) -> int:
        return self.tp * self.dp * self.pp

    def rank(self, tp: int, dp: int, pp: int) -> int:
        """
        >>> Layout(8, 2, 4).rank(3, 1, 2)
        43
        """
        return tp + self.tp * (dp + self.dp * pp)

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(tp, dp, pp) of ``rank``."""
        return rank % self.tp, (rank // self.tp) % self.dp, rank // (self.tp * self.dp)

    def tp_group(self, dp: int, pp: int) -> tuple[int, ...]:
        """The TP group at (dp, pp): ``tp`` consecutive ranks.

        >>> Layout(4, 2, 2).tp_group(1, 1)
        (12, 13, 14, 15)
        """
        first = self.rank(0, dp, pp)
        return tuple(range(first, first + self.tp))

    def dp_group(self, tp: int, pp: int) -> tuple[int, ...]:
        """The data-parallel group at (tp, pp): every ``tp``-th rank of the stage from ``tp``.

        >>> Layout(4, 3, 2).dp_group(1, 1)
        (13, 17, 21)
        """
        first = self.rank(tp, 0, pp)
        return tuple(range(first, first + self.tp * self.dp, self.tp))

    @lru_cache(maxsize=_FAMILIES_KEPT)
    def tp_groups(self, pp: int) -> tuple[tuple[int, ...], ...]:
        """Every TP group of stage ``pp``."""
        return tuple(self.tp_group(d, pp) for d in range(self.dp))

    @lru_cache(maxsize=_FAMILIES_KEPT)
    def dp_groups(self, pp: int) -> tuple[tuple[int, ...], ...]:
        """Every data-parallel group of stage ``pp``."""
        return tuple(self.dp_group(t, pp) for t in range(self.tp))

    # -- hybrid sharding ----------------------------------------------------------------
    @property
    def shard_size(self) -> int:
        """The ``dp`` coordinates of one shard group."""
        return self.dp // self.dp_replicate

    def dp_shard_group(self, tp: int, dp: int, pp: int) -> tuple[int, ...]:
        """The ZeRO/FSDP shard group of the rank at (tp, dp, pp): its data-parallel group
        without hybrid sharding, else ``dp / dp_replicate`` consecutive ``dp`` coordinates.

        >>> Layout(2, 8, 1, dp_replicate=2).dp_shard_group(1, 5, 0)
        (9, 11, 13, 15)
        """
        n = self.shard_size
        first = dp - dp % n
        return tuple(self.rank(tp, first + d, pp) for d in range(n))

    def dp_shard_groups(self, pp: int) -> tuple[tuple[int, ...], ...]:
        """Every shard group of stage ``pp`` (:meth:`dp_groups` without hybrid sharding)."""
        return tuple(self.dp_shard_group(t, d, pp) for d in range(0, self.dp, self.shard_size)
                     for t in range(self.tp))

    def dp_replicate_group(self, tp: int, dp: int, pp: int) -> tuple[int, ...]:
        """The ranks holding the same shard as the rank at (tp, dp, pp), one per replica
        (Megatron-Core's inter-instance group, FSDP2's ``dp_replicate`` mesh dimension).

        >>> Layout(2, 8, 1, dp_replicate=2).dp_replicate_group(1, 5, 0)
        (3, 11)
        """
        n = self.shard_size
        return tuple(self.rank(tp, dp % n + n * r, pp) for r in range(self.dp_replicate))

    def dp_replicate_groups(self, pp: int) -> tuple[tuple[int, ...], ...]:
        """Every replicate group of stage ``pp``."""
        return tuple(self.dp_replicate_group(t, d, pp) for d in range(self.shard_size) for t in range(self.tp))

    def _edp_split(self, tp: int, dp: int, pp: int) -> tuple[tuple[int, ...], int, int]:
        """(the expert-data-parallel group, the rank's index in it, the shard size)."""
        g = self.edp_group(tp, dp, pp)
        return g, g.index(self.rank(tp, dp, pp)), len(g) // self.dp_replicate

    def edp_shard_group(self, tp: int, dp: int, pp: int) -> tuple[int, ...]:
        """The routed experts' shard group: consecutive slices of the expert-data-parallel
        group, one per replica (Megatron-Core's ``create_hierarchical_groups`` with sizes
        ``[intra_partial_expert_data_parallel_size, num_distributed_optimizer_instances]``).

        >>> Layout(1, 8, 1, ep=2, dp_replicate=2).edp_shard_group(0, 5, 0)
        (5, 7)
        """
        g, i, n = self._edp_split(tp, dp, pp)
        return g[i - i % n:i - i % n + n]

    def edp_replicate_group(self, tp: int, dp: int, pp: int) -> tuple[int, ...]:
        """The ranks holding the same expert shard, one per replica.

        >>> Layout(1, 8, 1, ep=2, dp_replicate=2).edp_replicate_group(0, 5, 0)
        (1, 5)
        """
        g, i, n = self._edp_split(tp, dp, pp)
        return g[i % n::n]

    def edp_shard_groups(self, pp: int) -> tuple[tuple[int, ...], ...]:
        return tuple(dict.fromkeys(self.edp_shard_group(t, d, pp) for d in range(self.dp) for t in range(self.tp)))

    def edp_replicate_groups(self, pp: int) -> tuple[tuple[int, ...], ...]:
        return tuple(dict.fromkeys(self.edp_replicate_group(t, d, pp) for d in range(self.dp)
                                   for t in range(self.tp)))

    def cp_group(self, tp: int, dp: int, pp: int) -> tuple[int, ...]:
        """The context-parallel group of the rank at (tp, dp, pp), in ring order.

        >>> Layout(2, 4, 1, cp=2).cp_group(1, 3, 0)
        (5, 7)
        """
        first = self.rank(tp, dp - dp % self.cp, pp)
        return tuple(range(first, first + self.tp * self.cp, self.tp))

    @lru_cache(maxsize=_FAMILIES_KEPT)
    def cp_groups(self, pp: int) -> tuple[tuple[int, ...], ...]:
        """Every CP group of stage ``pp``."""
        step, span = self.tp, self.tp * self.cp
        return tuple(tuple(range(b, b + span, step)) for d in range(0, self.dp, self.cp)
                     for b in range(self.rank(0, d, pp), self.rank(0, d, pp) + self.tp))

    def ep_group(self, tp: int, dp: int, pp: int) -> tuple[int, ...]:
        """The expert-parallel group of the rank at (tp, dp, pp): ``ep`` consecutive
        data-parallel ranks with the same TP and CP coordinates (Megatron-Core's
        ``tp-cp-ep-dp-pp`` order puts EP just outside CP).

        >>> Layout(1, 8, 1, ep=4).ep_group(0, 5, 0)
        (4, 5, 6, 7)
        >>> Layout(1, 8, 1, cp=2, ep=2).ep_group(0, 5, 0)
        (5, 7)

        Folded (``etp != tp``): the ranks with the same ``etp`` and ``edp`` coordinates.

        >>> Layout(2, 8, 1, ep=4, etp=1).ep_group(1, 2, 0)
        (4, 5, 6, 7)
        """
        if self.folded:
            t, _, d = self.expert_coords(tp, dp)
            return tuple(self._expert_rank(t, e, d, pp) for e in range(self.ep))
        c, pure = dp % self.cp, dp // self.cp
        first = self.rank(tp, c + self.cp * (pure - pure % self.ep), pp)
        step = self.tp * self.cp
        return tuple(range(first, first + step * self.ep, step))

    @lru_cache(maxsize=_FAMILIES_KEPT)
    def ep_groups(self, pp: int) -> tuple[tuple[int, ...], ...]:
        """Every EP group of stage ``pp``, in order of first appearance over (dp, tp); unless
        folded each first appears at a data-parallel coordinate whose EP index is 0."""
        if self.folded:
            return tuple(dict.fromkeys(self.ep_group(t, d, pp) for d in range(self.dp) for t in range(self.tp)))
        if self.ep == 1:  # every rank of the stage alone, in rank order
            first = self.rank(0, 0, pp)
            return tuple((r,) for r in range(first, first + self.tp * self.dp))
        return tuple(self.ep_group(t, d, pp) for d in range(self.dp) if (d // self.cp) % self.ep == 0
                     for t in range(self.tp))

    def edp_group(self, tp: int, dp: int, pp: int) -> tuple[int, ...]:
        """The expert-data-parallel group: the ranks holding the same experts (same TP and EP
        coordinates, every CP and remaining DP coordinate), over which expert gradients are
        reduced.

        >>> Layout(1, 8, 1, ep=4).edp_group(0, 5, 0)
        (1, 5)
        >>> Layout(2, 8, 1, ep=4, etp=1).edp_group(1, 2, 0)
        (1, 5, 9, 13)
        """
        if self.folded:
            t, e, _ = self.expert_coords(tp, dp)
            etp = self.tp if self.etp is None else self.etp
            return tuple(self._expert_rank(t, e, d, pp) for d in range(self.tp * self.dp // (etp * self.ep)))
        e = (dp // self.cp) % self.ep
        return tuple(self.rank(tp, d, pp) for d in range(self.dp) if (d // self.cp) % self.ep == e)

    @lru_cache(maxsize=_FAMILIES_KEPT)
    def edp_groups(self, pp: int) -> tuple[tuple[int, ...], ...]:
        """Every expert-data-parallel group of stage ``pp``, in order of first appearance over
        (dp, tp); unless folded all appear among the first ``cp * ep`` data-parallel
        coordinates."""
        ds = range(self.dp if self.folded else min(self.dp, self.cp * self.ep))
        return tuple(dict.fromkeys(self.edp_group(t, d, pp) for d in ds for t in range(self.tp)))

    @lru_cache(maxsize=_FAMILIES_KEPT)
    def stage_pairs(self, src_pp: int, dst_pp: int) -> tuple[tuple[int, int], ...]:
        """Every (sender, receiver) pair between two stages, same tp and dp coordinates, in
        rank order."""
        n, src, dst = self.tp * self.dp, self.rank(0, 0, src_pp), self.rank(0, 0, dst_pp)
        return tuple(zip(range(src, src + n), range(dst, dst + n)))

    def placement(self, digits: tuple[str, ...]) -> tuple[int, ...]:
        """The GPU of every rank when ranks are laid on GPUs in the order ``digits`` (of
        ``tp``, ``cp``, ``dp``, ``pp``, innermost first; ``dp`` here the pure data-parallel
        coordinate, expert-parallel groups inside it).

        >>> Layout(2, 2, 2).placement(("tp", "pp", "dp", "cp"))
        (0, 1, 4, 5, 2, 3, 6, 7)
        """
        size = {"tp": self.tp, "cp": self.cp, "dp": self.dp // self.cp, "pp": self.pp}
        stride, s = {}, 1
        for dim in digits:
            stride[dim] = s
            s *= size[dim]
        out = []
        for r in range(self.world_size):
            t, d, p = self.coords(r)
            out.append(t * stride["tp"] + d % self.cp * stride["cp"] + d // self.cp * stride["dp"]
                       + p * stride["pp"])
        return tuple(out)


def gpu_placement(parallel: ParallelSpec) -> tuple[int, ...] | None:
    """The GPU index of every rank (``out[rank]``) under ``parallel.placement``; None when
    every rank runs on the GPU of its own index (Megatron's order, the default).

    >>> gpu_placement(ParallelSpec(tp=2, pp=2, dp=2, placement="tp-pp-dp"))
    (0, 1, 4, 5, 2, 3, 6, 7)
    >>> gpu_placement(ParallelSpec(tp=2, pp=2, dp=2)) is None
    True
    """
    pl = parallel.placement
    if isinstance(pl, str):
        layout = Layout.of(parallel)
        sizes = {"tp": parallel.tp, "cp": parallel.cp, "dp": parallel.dp, "pp": parallel.pp}
        digits = placement_digits(pl, sizes)
        if _strides(digits, sizes) == _strides(("tp", "cp", "dp", "pp"), sizes):
            return None  # Megatron's own order, up to dimensions of size 1
        pl = layout.placement(digits)
    pl = tuple(pl)
    return None if pl == tuple(range(len(pl))) else pl


def _strides(digits: tuple[str, ...], sizes: dict[str, int]) -> dict[str, int]:
    """The GPU stride of each dimension larger than 1 when ranks are laid in the order
    ``digits`` (as :meth:`Layout.placement`): two orders with equal strides place every rank
    alike."""
    out, s = {}, 1
    for d in digits:
        if sizes[d] > 1:
            out[d] = s
        s *= sizes[d]
    return out


def order_placements(parallel: ParallelSpec) -> dict[tuple[int, ...], str]:
    """Every placement a rank order gives (each order of tp, cp, dp and pp), with the order."""
    layout = Layout.of(parallel)
    out: dict[tuple[int, ...], str] = {}
    for digits in permutations(("tp", "cp", "dp", "pp")):
        out.setdefault(layout.placement(digits), "-".join(digits))
    return out

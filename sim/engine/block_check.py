"""Whether a run at layer or chunk granularity gave the op-level run's timeline.

A block (:class:`~sim.program.Block`) is timed alone, from its ops' prices: its collectives at
their solo times, its compute slowed only by its own collectives' kernels
(``_time_block`` of :mod:`sim.engine.pricing`). The op-level run times the same ops the same way unless
something outside the pass meets them there (``docs/design.md``, "Layer granularity"):

- **links**: a transfer of another stream on one of the links a block's collectives use
  (a data-parallel bucket, an FSDP gather or a pipeline send on the same NVSwitch port), or
  two of the block's own collectives on different streams sharing a link; the op run then
  runs them as flows that share the link (``Simulation._fixed_comm``,
  ``Simulation._alone_on_links``);
- **SMs**: a kernel outside the block holding SMs of the block's GPU while the block runs,
  when the block waits on its own collectives or its own kernels hold SMs beside its compute:
  the op run slows each compute op beside it (and so moves its collectives' exposure, and adds
  the two kernels' SMs), the block only its compute share, evenly (``Simulation._sensitivity``).
  Beside a block whose collectives are all hidden behind its compute and hold no SMs while it
  computes, both give the same end: every compute op is slowed alike, and slowing compute
  only widens the gaps that hide its collectives;
- **structure**: a collective of the block that no compute op of the pass waits for (the op
  run lets the next pass run beside it; the block holds its end), a block that waits at its
  start for a collective a later op of the pass waits for
  (:attr:`~sim.program.Program.early_block_waits`), and a run of every rank, where a block's
  group meets at its start rather than at its first collective.

None of these happening in the coarse run means none happens in the op run either: the two
timelines are the same up to the first time one of them meets something, and that meeting
would be in both. :func:`block_interference` looks for them in a finished run; where it
finds none, the op run gives the same times up to the order of floating-point additions.
:func:`watch_blocks` looks at the tasks a running simulation has placed so far and stops it
(:class:`BlockInterference`) at the first meeting: a run that will be set aside is cut short.
"""

from __future__ import annotations

import numpy as np

from sim.program import Block

__all__ = ["BlockInterference", "block_interference", "watch_blocks", "WATCH_AT_EVENTS_PER_TASK"]


WATCH_AT_EVENTS_PER_TASK = 0.25
""":func:`watch_blocks` looks once, after this many engine events per task of the program: a
pipeline runs about 2.5 events per task at chunk granularity, so about a tenth of the way
(where the first pipeline sends have met the first blocks), at a twentieth of the run's cost."""


class BlockInterference(Exception):
    """Raised by :func:`watch_blocks` to stop a run: something met one of its blocks."""


def watch_blocks(sim) -> None:
    """Raise :class:`BlockInterference` when something met a block among the tasks ``sim``
    has placed so far (for ``Simulation(..., watch=(watch_blocks, n))``)."""
    why = block_interference(sim)
    if why is not None:
        raise BlockInterference(why)


def block_interference(sim) -> str | None:
    """Why ``sim`` (a finished :class:`~sim.engine.Simulation`) may time its blocks unlike
    the op-level run of the same program, in a few words; None when nothing met any of its
    blocks (the op run then gives the same timeline, to rounding), or it has no blocks. In a
    run not finished yet, only the tasks placed so far are looked at.

    Each test is conservative: a block counts as met when something overlaps its whole
    interval, not just the collective or compute op it would meet."""
    prog = sim.program
    tasks = prog.tasks
    block_tasks = [t for t in tasks if type(t.op) is Block]
    if not block_tasks:
        return None
    if not prog.representative:
        return "every rank simulated: a block's group meets at its start"
    if prog.early_block_waits:
        return "a block waits at its start for a collective that a later op of its pass waits for"
    plans, start, finish, xfer = sim.plans, sim.start, sim.finish, sim.xfer_start
    op_links: dict[int, frozenset] = {}

    def links_of(op) -> frozenset:
        hit = op_links.get(id(op))
        if hit is None:
            hit = op_links[id(op)] = frozenset(link for ph in plans[id(op)].phases
                                               for f in ph.flows for link in f.links)
        return hit

    shape: dict[tuple, tuple] = {}   # (id(block), factor) -> its collectives' links, whether SMs beside it matter
    by_rank: dict[int, list[tuple[float, float]]] = {}   # blocks that kernels beside them time differently
    by_link: dict[int, dict[int, list[tuple[float, float]]]] = {}   # blocks with collectives, by link and rank
    for t in block_tasks:
        blk = t.op
        factor = sim.slowdown.get(t.rank, 1.0)
        hit = shape.get((id(blk), factor))
        if hit is None:
            why = _structure(blk, links_of)
            if why is not None:
                return why
            comm = blk.comm_ops()
            _, exposed, _, _ = sim.block_timing(blk, factor)
            held = any(s is not None and w > 0 and plans[id(op)].sm_fraction > 0
                       for s, op, w in zip(blk.streams, blk.ops, blk.waits))
            hit = shape[(id(blk), factor)] = (frozenset().union(*map(links_of, comm)),
                                              held or any(e > 0 for _, _, e in exposed))
        links, sensitive = hit
        s, e = start[t.id], finish[t.id]
        if e is None or not e > s:
            continue
        if sensitive:
            by_rank.setdefault(t.rank, []).append((s, e))
        for link in links:
            by_link.setdefault(link, {}).setdefault(t.rank, []).append((s, e))
    if not by_rank and not by_link:
        return None
    # what runs outside the blocks: each comm task's transfer, on its links and its GPU's SMs
    on_link: dict[int, list[tuple[float, float]]] = {}
    on_sms: dict[int, list[tuple[float, float]]] = {}
    for t in tasks:
        if not t.comm:
            continue
        e = finish[t.id]
        if e is None:
            continue
        s = xfer.get(t.id, start[t.id])
        if not e > s:
            continue
        for link in links_of(t.op):
            if link in by_link:
                on_link.setdefault(link, []).append((s, e))
        if t.rank in by_rank and not t.alone and plans[id(t.op)].sm_fraction > 0:
            on_sms.setdefault(t.rank, []).append((s, e))
    for link, ranks in by_link.items():
        other = on_link.get(link)
        for r, spans in ranks.items():
            if other and _meet(spans, other):
                return "a transfer outside a block shares a link with its collectives while it runs"
            if len(ranks) > 1 and _meet(spans, [x for q, xs in ranks.items() if q != r for x in xs]):
                return "blocks of two ranks share a link while they run"
    for r, spans in by_rank.items():
        if r in on_sms and _meet(spans, on_sms[r]):
            return "a kernel outside a block holds SMs of its GPU while it runs"
    return None


def _structure(blk: Block, links_of) -> str | None:
    """What in ``blk``'s own steps the op run times differently (see the module docstring)."""
    after = 0   # compute ops after step i
    for s, w in zip(reversed(blk.streams), reversed(blk.waits)):
        if s is None:
            after += 1
        elif w >= after:
            return "a collective of a block outlives its compute"
    streams: dict = {}
    for s, op in zip(blk.streams, blk.ops):
        if s is not None:
            streams[s] = streams.get(s, frozenset()) | links_of(op)
    seen: set = set()
    for links in streams.values():
        if seen & links:
            return "collectives of a block on two streams share a link"
        seen |= links
    return None


def _meet(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> bool:
    """Whether an interval of ``a`` and one of ``b`` overlap (open intervals: touching ends
    do not meet)."""
    if not a or not b:
        return False
    bs = np.array(sorted(b))
    # the union of b, as disjoint intervals with increasing ends
    ends = np.maximum.accumulate(bs[:, 1])
    new = np.empty(len(bs), dtype=bool)
    new[0] = True
    new[1:] = bs[1:, 0] > ends[:-1]
    first = np.flatnonzero(new)
    u_start = bs[first, 0]
    u_end = ends[np.append(first[1:] - 1, len(bs) - 1)]
    av = np.asarray(a)
    i = np.searchsorted(u_end, av[:, 0], side="right")   # the first union interval ending after a's start
    ok = i < len(u_start)
    return bool(np.any(u_start[i[ok]] < av[ok, 1]))

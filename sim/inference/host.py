"""The host that issues a serving step's kernels: a kernel cannot start before it is issued.

Per step, the host waits for the step before it (the sampled token feeds this step), does its
per-step work ``w`` (the stack's ``step_s``; before the prefill also its per-request work
``r``), then issues the step's kernels in order (the compute ops and the collectives, as
:mod:`sim.inference.ops` lists them), one every ``c`` seconds (``kernel_issue_s``) when eager,
running ahead of the GPU; under CUDA graphs one launch submits the whole step. The GPU runs
kernel ``i`` at ``s_i = max(e_(i-1), h_i)`` with ``h_i = r + w + (i + 1) c`` its issue time
and ``e_i = s_i + d_i`` its end. Unrolled (a max-plus recurrence), the step ends at

    ``e_n = D + max(0, max_i (h_i - S_i))``,

where ``d_i`` is kernel ``i``'s time on the GPU alone (its price, a collective's solo time),
``D = sum d_i`` and ``S_i = d_0 + ... + d_(i-1)`` is when kernel ``i`` would start with the host
always ahead. So the step is its GPU time plus one *host gap*, ``max(0, max_i (h_i - S_i))``:
the host's lag at the kernel where it is furthest behind. Lead the host builds during long
kernels (``S_i`` growing faster than ``(i + 1) c``) absorbs later short ones; a step of short
kernels becomes ``about n c``, its length set by its kernel count and not by the GPU's
bandwidth. The program puts the gap at the head of the step, as one task on the compute
stream (:class:`HostOp`): the step ends exactly when the recurrence says, its kernels shown
back to back after it.

This is the picture of the CUDA programming guide's asynchronous launches and of NVIDIA's
"Getting Started with CUDA Graphs" (2019): a stream of kernels shorter than their launch runs
at the launch rate; a graph replays them with one launch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sim.costs.analytical import AnalyticalCostModel
from sim.engine.network import solo_time_s
from sim.inference.stack import ServingStack
from sim.types import OpKind
from sim.workload.ops import Op
from sim.workload.steps import Step

__all__ = ["HostOp", "HostCostModel", "host_lag_s", "host_gap_s", "step_durations"]


@dataclass(frozen=True)
class HostOp:
    """The compute stream waiting for its host: ``seconds`` with no kernel running."""

    seconds: float
    kind = OpKind.HOST
    flops = 0.0
    bytes = 0.0


def host_lag_s(durations: Sequence[float], issue_s: float, start_s: float = 0.0) -> float:
    """How long the GPU waits for the host over a step: ``max(0, max_i (h_i - S_i))`` with
    ``h_i = start_s + (i + 1) issue_s`` (module docstring).

    >>> host_lag_s([1.0, 1.0, 1.0], 0.5)          # host always ahead: only the first issue
    0.5
    >>> host_lag_s([0.125, 0.125, 0.125], 1.0)    # host-bound: n c - (n - 1) d
    2.75
    >>> host_lag_s([5.0, 0.125, 0.125], 1.0)      # lead built during the long kernel absorbs the rest
    1.0
    """
    worst = 0.0
    started = 0.0
    for i, d in enumerate(durations):
        lag = start_s + (i + 1) * issue_s - started
        if lag > worst:
            worst = lag
        started += d
    return max(worst, start_s)


def host_gap_s(stack: ServingStack, durations: Sequence[float], first_step: bool) -> float:
    """The host gap before a step of kernels taking ``durations`` on the GPU alone: the per-step
    work, the per-request work before the first step, and under eager issue the lag of
    :func:`host_lag_s`.

    >>> s = ServingStack("x", "", (), False, 1.0, 0.25, 2.0)
    >>> host_gap_s(s, [0.25, 0.25, 0.25], False), host_gap_s(s, [0.25, 0.25, 0.25], True)
    (2.75, 4.75)
    >>> host_gap_s(ServingStack("g", "", (), True, 1.0, 0.25, 0.0), [0.25] * 3, False)
    0.25
    """
    work = stack.step_s + (stack.request_s if first_step else 0.0)
    if not stack.eager or stack.kernel_issue_s <= 0:
        return work
    return host_lag_s(durations, stack.kernel_issue_s, work)


class HostCostModel(AnalyticalCostModel):
    """The analytical cost model that also prices :class:`HostOp` (its seconds)."""

    def compute_time_s(self, op: Op) -> float:
        if type(op) is HostOp:
            return op.seconds
        return super().compute_time_s(op)


def step_durations(costs: AnalyticalCostModel,
                   capacity_bytes_per_s: Sequence[float]) -> Callable[[Sequence[Step]], list[float]]:
    """``durations(steps)``: each op's time on the GPU alone, in issue order: a compute op's
    price, a collective's time on an idle network (its plan's phases,
    :func:`sim.engine.network.solo_time_s`). Serving one batch, each collective is waited for by
    the next compute op, so these follow one another."""
    solo: dict[int, float] = {}
    capacity = list(capacity_bytes_per_s)

    def durations(steps: Sequence[Step]) -> list[float]:
        out = []
        for st in steps:
            if st.stream is None:
                out.append(costs.compute_time_s(st.op))
                continue
            d = solo.get(id(st.op))
            if d is None:
                d = solo[id(st.op)] = solo_time_s(costs.comm_plan(st.op).phases, capacity)
            out.append(d)
        return out

    return durations

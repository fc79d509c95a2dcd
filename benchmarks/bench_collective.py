"""Time ``llmsim collective`` over growing groups, and compare its pricing with every flow's.

::

    python benchmarks/bench_collective.py                       # dgx-h100 all-reduce, 8 .. 8192 ranks
    python benchmarks/bench_collective.py --ranks 8,64,512,65536 --topology dgx-a100 --op all-gather
    python benchmarks/bench_collective.py --full-up-to 1024     # also every flow in the flow network

For each rank count: the wall time of :func:`sim.studies.collective.collective` (the plan, then the
flows the group's first rank sends or receives, weighted as a run weights them:
:func:`sim.studies.collective.representative_phases`), the algorithm, the time and busbw, and, up to
``--full-up-to`` ranks, the same plan timed over every rank's flows
(:func:`sim.engine.network.solo_time_s` on the whole plan: seconds at 512 ranks, minutes at
8192) with the relative difference of
the two times (0, or a unit in the last place or two). Wall times depend on the machine and
its load; compare figures only from the same one.
"""

from __future__ import annotations

import argparse
import time

from sim.config import load_topology
from sim.costs.comm import plan_comm
from sim.engine.network import solo_time_s
from sim.studies.collective import collective
from sim.topology.routing import Fabric
from sim.types import CollectiveKind, CommClass
from sim.workload.ops import CommOp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default="dgx-h100")
    ap.add_argument("--op", default="all-reduce")
    ap.add_argument("--bytes", type=float, default=2.0**30)
    ap.add_argument("--ranks", default="8,64,512,1024,8192")
    ap.add_argument("--full-up-to", type=int, default=512, help="time every flow too up to this many ranks")
    args = ap.parse_args()
    topo, op = load_topology(args.topology), CollectiveKind(args.op)
    print(f"{args.op} of {args.bytes:,.0f} bytes on {topo.name}")
    print(f"  {'ranks':>6} {'wall s':>8} {'algorithm':<12} {'time us':>12} {'busbw GB/s':>11} "
          f"{'all flows wall s':>17} {'relative difference':>20}")
    for n in (int(x) for x in args.ranks.split(",")):
        t0 = time.perf_counter()
        r = collective(topo, op, args.bytes, n)
        wall = time.perf_counter() - t0
        full = diff = ""
        if n <= args.full_up_to:
            fabric = Fabric.of(topo, n)
            group = (0, n - 1) if op is CollectiveKind.SEND_RECV else tuple(range(n))
            t1 = time.perf_counter()
            plan = plan_comm(fabric, CommOp(op, CommClass.DP, group, args.bytes), representative=False)
            every = solo_time_s(plan.phases, fabric.capacity_bytes_per_s)
            full, diff = f"{time.perf_counter() - t1:.2f}", f"{r.time_s / every - 1:+.1e}"
        print(f"  {n:>6} {wall:>8.2f} {r.algorithm:<12} {r.time_s * 1e6:>12.1f} {r.busbw_bytes_per_s / 1e9:>11.2f} "
              f"{full:>17} {diff:>20}")


if __name__ == "__main__":
    main()

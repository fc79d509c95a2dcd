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

from harness import Column, Table, best_of, make_parser

from sim.config import load_topology
from sim.costs.comm import plan_comm
from sim.engine.network import solo_time_s
from sim.studies.collective import collective
from sim.topology.routing import Fabric
from sim.types import CollectiveKind, CommClass
from sim.workload.ops import CommOp

TABLE = Table((Column("ranks", 6), Column("wall s", 8, ".2f"), Column("algorithm", 12, align="<"),
               Column("time us", 12, ".1f"), Column("busbw GB/s", 11, ".2f"), Column("all flows wall s", 17),
               Column("relative difference", 20)), indent="  ", rule=False)


def main() -> None:
    ap = make_parser(__doc__, with_json=False)
    ap.add_argument("--topology", default="dgx-h100")
    ap.add_argument("--op", default="all-reduce")
    ap.add_argument("--bytes", type=float, default=2.0**30)
    ap.add_argument("--ranks", default="8,64,512,1024,8192")
    ap.add_argument("--full-up-to", type=int, default=512, help="time every flow too up to this many ranks")
    args = ap.parse_args()
    topo, op = load_topology(args.topology), CollectiveKind(args.op)
    print(f"{args.op} of {args.bytes:,.0f} bytes on {topo.name}")
    print(TABLE.heading())
    for n in (int(x) for x in args.ranks.split(",")):
        t = best_of(lambda n=n: collective(topo, op, args.bytes, n), 1)
        wall, r = t.best_s, t.result
        full = diff = ""
        if n <= args.full_up_to:
            fabric = Fabric.of(topo, n)
            group = (0, n - 1) if op is CollectiveKind.SEND_RECV else tuple(range(n))

            def every_flow(fabric=fabric, group=group):
                plan = plan_comm(fabric, CommOp(op, CommClass.DP, group, args.bytes), representative=False)
                return solo_time_s(plan.phases, fabric.capacity_bytes_per_s)

            e = best_of(every_flow, 1)
            full, diff = f"{e.best_s:.2f}", f"{r.time_s / e.result - 1:+.1e}"
        print(TABLE.row((n, wall, r.algorithm, r.time_s * 1e6, r.busbw_bytes_per_s / 1e9, full, diff)))

if __name__ == "__main__":
    main()

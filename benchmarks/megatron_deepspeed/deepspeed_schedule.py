"""How long DeepSpeed's pipeline schedule takes against Megatron-LM's 1F1B, stage times alone.

::

    python benchmarks/megatron_deepspeed/deepspeed_schedule.py
    python benchmarks/megatron_deepspeed/deepspeed_schedule.py --micro-batches 240 --stages 35 --transfer 0.01

DeepSpeed's ``TrainSchedule`` (deepspeedai/DeepSpeed ``deepspeed/runtime/pipe/schedule.py`` @
83fd8f8, the schedule Megatron-DeepSpeed's pipeline engine runs) gives each stage
``2 (m + p - 1)`` steps in lock step, forward on the steps of its parity and backward on the
others, and in each step first its blocking sends and receives (a forward step: ``SendGrad`` of
the previous micro-batch, ``RecvActivation`` of this one; a backward step: ``RecvGrad``, then
``SendActivation`` of the previous micro-batch), then its pass. This script replays the command
order llmsim transcribes (:mod:`sim.workload.deepspeed_pipe`, which the simulator itself issues
under ``parallel.blocking_p2p``) with stage times of its own: a pass takes ``f`` or ``b``, a send and its receive
are one rendezvous that takes ``--transfer`` on both stages once both have reached it. It prints
the iteration against Megatron-LM's 1F1B with the same stage times, ``(m + p - 1)(f + b)`` (for
free transfers; Narayanan et al. 2021, Sec. 2.2.1).
"""

from __future__ import annotations

import argparse

from sim.workload.deepspeed_pipe import train_schedule as ds_train_schedule


def train_schedule(m: int, p: int, s: int) -> list[tuple[str, int]]:
    """Stage ``s``'s commands in order, as ``TrainSchedule.steps`` yields them (compute and
    point-to-point only; :func:`sim.workload.deepspeed_pipe.train_schedule`):
    ``("F"|"B"|"SA"|"RA"|"SG"|"RG", micro-batch)``."""
    return [(c.instruction.value, c.microbatch) for c in ds_train_schedule(m, p, s)]


def replay(m: int, p: int, f: float, b: float, transfer: float = 0.0) -> float:
    """The iteration: the latest stage's clock once every command has run."""
    progs = [train_schedule(m, p, s) for s in range(p)]
    pc, clock = [0] * p, [0.0] * p
    waiting: dict[tuple, tuple[int, float]] = {}
    partner = {"SA": ("A", 0, 1), "RA": ("A", -1, 0), "SG": ("G", 0, -1), "RG": ("G", 1, 0)}
    while any(pc[s] < len(progs[s]) for s in range(p)):
        moved = False
        for s in range(p):
            while pc[s] < len(progs[s]):
                op, mb = progs[s][pc[s]]
                if op in ("F", "B"):
                    clock[s] += f if op == "F" else b
                    pc[s] += 1
                    moved = True
                    continue
                kind, src, dst = partner[op]
                key = (kind, mb, s + src, s + dst)
                if key in waiting and waiting[key][0] != s:
                    other, _ = waiting.pop(key)
                    clock[s] = clock[other] = max(clock[s], clock[other]) + transfer
                    pc[s] += 1
                    pc[other] += 1
                    moved = True
                    continue
                waiting[key] = (s, clock[s])
                break
        if not moved:
            raise RuntimeError("the replay deadlocked")
    return max(clock)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--micro-batches", type=int, nargs="+", default=[240, 128, 32])
    ap.add_argument("--stages", type=int, nargs="+", default=[35, 12, 8])
    ap.add_argument("--forward", type=float, default=1.0, help="a forward pass's time (default 1)")
    ap.add_argument("--backward", type=float, default=3.0,
                    help="a backward pass's time (default 3: recomputed forward and backward)")
    ap.add_argument("--transfer", type=float, default=0.0, help="a send's time (default 0)")
    args = ap.parse_args(argv)
    f, b = args.forward, args.backward
    print(f"forward {f}, backward {b}, transfer {args.transfer}")
    print(f"{'micro-batches':>13} {'stages':>6} {'DeepSpeed':>10} {'1F1B':>10} {'ratio':>6}")
    for m, p in zip(args.micro_batches, args.stages):
        ds = replay(m, p, f, b, args.transfer)
        ideal = (m + p - 1) * (f + b)
        print(f"{m:>13} {p:>6} {ds:>10.2f} {ideal:>10.2f} {ds / ideal:>6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

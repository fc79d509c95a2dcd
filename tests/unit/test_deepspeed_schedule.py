"""benchmarks/megatron_deepspeed/deepspeed_schedule.py: DeepSpeed's TrainSchedule, transcribed and replayed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from sim.workload.deepspeed_pipe import train_schedule
from tests.conftest import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "megatron_deepspeed" / "deepspeed_schedule.py"


@pytest.fixture(scope="module")
def ds():
    return load_script(SCRIPT)


@pytest.mark.parametrize("m, p", [(8, 4), (16, 5), (240, 35)])
def test_every_stage_runs_each_micro_batch_forward_then_backward_and_pairs_its_transfers(ds, m, p):
    progs = [ds.train_schedule(m, p, s) for s in range(p)]
    for s, prog in enumerate(progs):
        ops = Counter(op for op, _ in prog)
        assert ops["F"] == ops["B"] == m
        for mb in range(m):
            assert prog.index(("F", mb)) < prog.index(("B", mb))
        assert ops["SA"] == ops["RG"] == (m if s < p - 1 else 0)
        assert ops["RA"] == ops["SG"] == (m if s > 0 else 0)
        # a stage holds at most p - s micro-batches between their forward and backward (num_pipe_buffers)
        live = peak = 0
        for op, _ in prog:
            live += {"F": 1, "B": -1}.get(op, 0)
            peak = max(peak, live)
        assert peak <= max(2, min(p - s, m))


@pytest.mark.parametrize("m, p, f, b", [(8, 4, 1.0, 2.0), (32, 8, 1.0, 3.0), (240, 35, 1.0, 3.0)])
def test_free_transfers_take_megatrons_1f1b_time_and_paid_ones_more(ds, m, p, f, b):
    assert ds.replay(m, p, f, b) == pytest.approx((m + p - 1) * (f + b))
    assert ds.replay(m, p, f, b, transfer=0.01) > (m + p - 1) * (f + b)


def _names(commands) -> list[tuple[str, int]]:
    return [(c.instruction.value, c.microbatch) for c in commands]


def _commands(spans, rank: int) -> list[tuple[str, int]]:
    """Rank ``rank``'s sends, receives and passes in the order its timeline runs them, in the
    transcription's names (a pass once, however many kernels it runs)."""
    names = {"ncclSend act": "SA", "ncclSend grad": "SG", "ncclRecv act": "RA", "ncclRecv grad": "RG"}
    out: list[tuple[str, int]] = []
    for s in sorted((s for s in spans if s.rank == rank), key=lambda s: (s.start_s, s.end_s)):
        args = dict(s.args)
        if s.name in names:
            out.append((names[s.name], args["microbatch"]))
        elif s.kind.value not in ("p2p", "collective") and args.get("phase") in ("fwd", "bwd"):
            cmd = ("F" if args["phase"] == "fwd" else "B", args["microbatch"])
            if not out or out[-1] != cmd:
                out.append(cmd)
    return out


@pytest.mark.parametrize("m, p", [(8, 4), (3, 4)])
def test_the_engine_runs_deepspeeds_exchanges_in_train_schedule_order_each_blocking(m, p):
    """Under ``parallel.blocking_p2p`` (DeepSpeed's pipeline engine) every stage's timeline runs
    its sends, receives and passes in the order DeepSpeed's TrainSchedule issues them (the
    transcription, :func:`sim.workload.deepspeed_pipe.train_schedule`), and none of them
    overlaps another or a pass: each is a blocking exchange the next command waits for.
    Megatron's 1F1B (not blocking) sends each activation right after its forward, not after the
    next backward's receive."""
    from sim.config import load_topology
    from sim.runner import simulate
    from tests.conftest import make_workload, replace_settings

    base = make_workload(pp=p, gbs=m, layers=p, overlap=False)
    topo = load_topology("dgx-a100")
    run = simulate(replace_settings(base, blocking_p2p=True), topo, full=True)
    spans = list(run.result.spans)
    for s in range(p):
        assert _commands(spans, s) == _names(train_schedule(m, p, s)), s
        mine = sorted((x.start_s, x.end_s) for x in spans if x.rank == s and x.kind.value != "collective"
                      and dict(x.args).get("phase") in ("fwd", "bwd"))
        assert all(a[1] <= b[0] + 1e-12 for a, b in zip(mine, mine[1:])), s  # one at a time
    megatron = simulate(base, topo, full=True).result
    assert _commands(list(megatron.spans), 0) != _names(train_schedule(m, p, 0))
    assert run.result.makespan_s > megatron.makespan_s

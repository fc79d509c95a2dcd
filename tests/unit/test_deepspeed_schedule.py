"""benchmarks/megatron_deepspeed/deepspeed_schedule.py: DeepSpeed's TrainSchedule, transcribed and replayed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

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

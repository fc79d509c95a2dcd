"""sim.engine.pass_replay: a layer pass that only its own collectives overlap, replayed alone
with a fresh HeldSMs, gives every op's start and end as the op-level engine placed them."""

from __future__ import annotations

from sim.engine import pass_replay


def test_quiet_and_own_only_passes_replay_to_the_bit():
    row = pass_replay.study("tiny")
    kinds, exact = row["passes"], row["replayed_to_the_bit"]
    assert kinds["quiet"] > 0 and kinds["own_only"] > 0  # both kinds occur
    assert exact == {"quiet": kinds["quiet"], "own_only": kinds["own_only"]}
    assert row["first_op_off"] == {} and row["worst_difference_s"] == {"quiet": 0.0, "own_only": 0.0}


def test_a_replay_that_ignores_held_sms_is_caught(monkeypatch):
    class NothingHeld(pass_replay.HeldSMs):
        def hold(self, t0, t1, fraction):  # the replay's kernels hold no SMs; the engine's do
            return None

    monkeypatch.setattr(pass_replay, "HeldSMs", NothingHeld)
    row = pass_replay.study("tiny")
    assert row["replayed_to_the_bit"]["own_only"] < row["passes"]["own_only"]
    assert row["first_op_off"]

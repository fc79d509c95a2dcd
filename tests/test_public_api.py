"""The package exports exactly its curated public names (httpx's test_exported_members)."""

import types

import sim


def test_all_is_sorted_and_complete():
    public = {n for n in dir(sim) if not n.startswith("_") and not isinstance(getattr(sim, n), types.ModuleType)}
    assert sim.__all__ == sorted(sim.__all__, key=lambda n: (n.startswith("_"), n))
    assert public == set(sim.__all__) - {"__version__"}


def test_quick_api_runs():
    run = sim.simulate(sim.load_workload("tiny"), sim.load_topology("dgx-a100"))
    assert sim.make_report(run).iteration_time_s == run.result.makespan_s
    assert sim.validate_chrome_trace(sim.chrome_trace(run.result)) == []


def test_simulate_leaves_the_garbage_collector_as_it_found_it():
    """A library caller's objects are its own: the run pauses the collector while it builds and
    runs, then leaves it enabled and freezes nothing (the CLI, whose process ends with the
    command, freezes the run's objects itself)."""
    import gc

    from sim import load_topology, load_workload, simulate

    gc.unfreeze()
    assert gc.isenabled()
    simulate(load_workload("tiny"), load_topology("dgx-a100"))
    assert gc.isenabled() and gc.get_freeze_count() == 0


def _scanned(gc, objects):
    """Whether any of ``objects`` sits in one of the collector's scanned generations (0-2)."""
    ids = {id(o) for o in objects}
    return any(id(o) in ids for o in gc.get_objects())


def test_simulate_leaves_its_objects_out_of_the_young_generation():
    """The run's survivors are not left young for the collector's next pass to walk (0.34 s of
    gpt3-175b's run): the young generation's count is what it was, not the run's allocations;
    a caller's frozen objects stay frozen and a disabled collector stays disabled."""
    import gc

    from sim import load_topology, load_workload, simulate

    w, topo = load_workload("tiny"), load_topology("dgx-a100")
    gc.unfreeze()
    gc.collect()
    run = simulate(w, topo)
    assert gc.isenabled() and gc.is_tracked(run.program)
    assert any(o is run.program for o in gc.get_objects(generation=2))  # moved to the oldest, unscanned
    mine = [[i] for i in range(1000)]
    gc.freeze()
    frozen = gc.get_freeze_count()
    # The freeze count may fall while a run goes on (a frozen object that another thread, such as
    # pytest-xdist's, lets go of is freed by reference counting), never rise; the caller's own
    # frozen objects stay out of every scanned generation.
    try:
        simulate(w, topo)
        assert gc.isenabled() and 0 < gc.get_freeze_count() <= frozen
        assert not _scanned(gc, mine)
        gc.disable()
        simulate(w, topo)
        assert not gc.isenabled() and 0 < gc.get_freeze_count() <= frozen
        assert not _scanned(gc, mine)
    finally:
        gc.enable()
        gc.unfreeze()
    assert len(mine) == 1000

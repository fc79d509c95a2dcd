"""Worker pools that stop with Ctrl-C (sim/studies/workers.py): ``llmsim sweep`` and ``llmsim validate
--jobs N`` drop what is queued and stop their workers, with no traceback."""

from __future__ import annotations

import multiprocessing
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor, wait
from pathlib import Path

import pytest
import yaml

import sim
import sim.studies.workers
from sim.studies.workers import abandon, ignore_sigint

CASES = Path(sim.__file__).resolve().parent.parent / "workloads" / "validation"


def test_abandon_stops_the_workers_and_fails_what_was_queued(monkeypatch):
    thread_errors: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: thread_errors.append(args.exc_value))
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=ignore_sigint) as pool:
        assert pool.submit(abs, -1).result() == 1  # the worker is up
        futures = [pool.submit(time.sleep, 600) for _ in range(4)]  # one runs, one is queued, two wait
        abandon(pool)
    done, _ = wait(futures, timeout=300)  # the pool's manager thread fails them once it sees the workers gone
    assert len(done) == len(futures)
    assert thread_errors == []  # Python 3.11's manager thread raised on a cancelled future
    assert not any(not f.cancelled() and f.exception() is None for f in futures)  # none slept to the end


def test_validate_with_jobs_stops_its_workers_on_ctrl_c(tmp_path, monkeypatch):
    from sim.studies.validate import validate

    cases = [c for c in yaml.safe_load((CASES / "korthikanti2022.yaml").read_text()) if "_t4_22B_" in c["id"]]
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump(cases))
    abandoned = []
    monkeypatch.setattr(sim.studies.workers, "abandon", lambda pool: (abandoned.append(pool), abandon(pool)))

    def interrupted(self, timeout=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(Future, "result", interrupted)
    with pytest.raises(KeyboardInterrupt):
        validate([str(path)], jobs=2)
    assert len(abandoned) == 1 and isinstance(abandoned[0], ProcessPoolExecutor)


def test_simulations_interrupted_on_worker_processes_leave_no_traceback(monkeypatch):
    import sim.studies.sweep.core
    from sim.config import load_topology, load_workload
    from sim.studies.sweep.core import Candidate, run_simulations

    thread_errors: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: thread_errors.append(args.exc_value))
    waits = []

    def interrupted(*args, **kwargs):  # Ctrl-C once a job has finished, with others queued
        waits.append(args)
        if len(waits) > 1:
            raise KeyboardInterrupt
        return real_wait(*args, **kwargs)

    real_wait = sim.studies.sweep.core.wait
    monkeypatch.setattr(sim.studies.sweep.core, "wait", interrupted)
    jobs = [Candidate((i,), load_workload("tiny"), 0.0) for i in range(12)]
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=ignore_sigint) as pool:
        # 8 in flight on one worker: two in its queue, six waiting in the pool
        out, stopped = run_simulations(jobs, load_topology("dgx-a100"), "chunk", pool, slots=4)
    for thread in threading.enumerate():  # the pool's manager thread fails what was in flight
        if type(thread).__name__ == "_ExecutorManagerThread":
            thread.join(timeout=300)
    assert stopped and 1 <= len(out) < len(jobs)
    assert thread_errors == []  # Python 3.11's manager thread raised on each cancelled future


def test_abandon_returns_once_the_pool_manager_thread_has_ended():
    """Left running, the manager thread closes its wake-up pipe while the interpreter's exit
    hook writes to it: a traceback ending "OSError: [Errno 9] Bad file descriptor" after
    Ctrl-C (issue #31, in 3 of 8 interrupted ``sweep --workers 2``)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=ignore_sigint) as pool:
        assert pool.submit(abs, -1).result() == 1
        futures = [pool.submit(time.sleep, 600) for _ in range(3)]
        abandon(pool)
        managers = [t for t in threading.enumerate() if type(t).__name__ == "_ExecutorManagerThread"]
        assert managers == []
    assert all(f.done() for f in futures)


def test_workers_take_the_parents_memory_budget():
    from sim.budget import Budget, current_budget, memory_budget
    from sim.studies.workers import local_pool

    with memory_budget(3.0), local_pool(2) as pool:
        budget = pool.submit(current_budget).result()
    assert budget == Budget(3.0 * 2**30, "--max-memory-gib")


def test_local_workers_share_the_default_budget():
    """Two workers on the default budget take half of it each: together they stay within what
    one process would take. ``--max-memory-gib`` is what one simulation may take, in each."""
    from sim.budget import current_budget, default_budget
    from sim.studies.workers import local_pool

    with local_pool(2) as pool:
        budgets = [pool.submit(current_budget).result() for _ in range(2)]
    whole = default_budget()
    assert all(b.bytes == whole.bytes / 2 for b in budgets)
    assert "shared by 2 worker processes" in budgets[0].why



def test_a_config_error_reaches_the_parent_whole(tmp_path):
    """A case file a worker cannot read raises its ConfigError in the parent, message and
    fields intact (validate's workers read the files), whatever the error class's constructor takes."""
    import pickle

    from sim.budget import Budget, BudgetError, Estimate
    from sim.errors import ConfigError, Described
    from sim.studies.validate import validate

    err = ConfigError("a.yaml", "parallel.tp", "a positive integer", Described("minus one"))
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), str(back), back.field, back.excerpt) == (ConfigError, str(err), "parallel.tp", "minus one")
    over = BudgetError(Estimate("a job", 10**9, 0, 9 * 2**30), Budget(2**30, "a test"))
    back = pickle.loads(pickle.dumps(over))
    assert (type(back), str(back), back.estimate, back.budget) == (BudgetError, str(over), over.estimate, over.budget)

    bad = tmp_path / "bad.yaml"
    bad.write_text("cases: [1, 2\n")
    with pytest.raises(ConfigError) as exc:
        validate([str(bad)], jobs=2)
    assert str(bad) in str(exc.value) and exc.value.field.startswith("line")


PARENT = """
import multiprocessing, sys, time
from sim.studies.workers import in_worker, local_pool

with local_pool(2) as pool:
    jobs = [pool.submit(in_worker, time.sleep, 120) for _ in range(2)]
    while len(multiprocessing.active_children()) < 2:
        time.sleep(0.05)
    time.sleep(1.0)  # the workers have taken their jobs
    print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_workers_exit_when_their_parent_is_killed():
    """A parent killed outright (kill -9) runs no cleanup: its workers, each holding a job of
    two minutes, end within seconds rather than finishing work no one will read."""
    import os
    import signal
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(Path(sim.__file__).resolve().parent.parent))
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) >= 2 and all(_alive(p) for p in pids)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 20
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()

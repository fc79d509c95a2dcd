"""Local worker processes for the commands that simulate many runs (``sweep``, ``validate``).

How many by default (:func:`cpu_count`), the check of a count given on the command line
(:func:`check_workers`), the pool itself (:func:`local_pool`: this process for one worker,
"spawn" processes that leave Ctrl-C to the parent otherwise) and how to stop it after Ctrl-C
(:func:`abandon`).

Ctrl-C at a terminal sends SIGINT to the whole foreground process group: the parent and each
worker process. A worker that raised ``KeyboardInterrupt`` would hand it back as the result of
its current job and take the next one, and leaving the pool's ``with`` block waits for every
queued job. So the workers ignore SIGINT (:func:`ignore_sigint`, their initializer) and the
parent, which acts on it, stops them (:func:`abandon`): ``llmsim sweep``, ``llmsim validate``
and ``llmsim whatif generations --reoptimize`` return at once.

A parent that is killed outright (``kill -9``, the kernel's out-of-memory killer, a test runner
stopped) runs none of that: its workers would go on with the job they hold, which can take
minutes, with no one to read the result. Each worker therefore watches its parent
(:func:`exit_with_parent`) and exits as soon as the parent is gone.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.budget import Budget

__all__ = ["InlineExecutor", "abandon", "check_workers", "cpu_count", "exit_with_parent", "ignore_sigint", "in_worker",
           "local_pool", "start_worker"]

MANAGER_JOIN_S = 30.0
"""How long :func:`abandon` waits for a process pool's manager thread once its workers are
stopped (it ends at once: its workers are gone)."""


def cpu_count() -> int:
    """The CPUs this process may run on: its affinity mask where the OS has one
    (:func:`os.sched_getaffinity`; a container or ``taskset`` limits it), else
    :func:`os.cpu_count`; at least 1."""
    counter = getattr(os, "process_cpu_count", None)  # Python 3.13: the affinity, where there is one
    if counter is not None:
        return counter() or 1
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def check_workers(workers: int | None, option: str) -> None:
    """A ConfigError naming ``option`` (``--workers``, ``--jobs``) unless ``workers`` is None
    (the default: :func:`cpu_count`) or a positive count."""
    if workers is not None and workers < 1:
        raise ConfigError(f"<{option}>", option, "a positive number of worker processes", workers)


class InlineExecutor(Executor):
    """Runs each task when it is submitted, in this process: one worker takes the same
    submit-and-wait path as a pool without starting one."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 -- delivered through the future, as a pool would
            fut.set_exception(exc)
        return fut


def ignore_sigint() -> None:
    """Ctrl-C reaches the whole process group; only the parent acts on it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def exit_with_parent() -> None:
    """In a worker process: a daemon thread that waits for the parent process to end (its
    sentinel, :func:`multiprocessing.parent_process`) and then ends this process at once
    (:func:`os._exit`: the job it holds has no one to report to). Nothing in a process that
    has no parent of the multiprocessing kind."""
    import multiprocessing
    import threading

    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()
        os._exit(1)

    threading.Thread(target=watch, name="llmsim-parent-watch", daemon=True).start()


def start_worker(budget: Budget | None) -> None:
    """Worker initializer: ignore Ctrl-C (:func:`ignore_sigint`), exit when the parent does
    (:func:`exit_with_parent`), and take the budget the parent gives it (:func:`worker_budget`;
    :func:`sim.budget.adopt_budget`, None: the default budget)."""
    from sim.budget import adopt_budget

    ignore_sigint()
    exit_with_parent()
    adopt_budget(budget)


@contextmanager
def local_pool(workers: int) -> Iterator[Executor]:
    """:class:`InlineExecutor` for one worker, else a
    :class:`~concurrent.futures.ProcessPoolExecutor` of ``workers`` "spawn" processes (a
    progress bar's monitor thread makes forking unsafe) that ignore Ctrl-C: after one, the
    parent calls :func:`abandon`."""
    if workers == 1:
        yield InlineExecutor()
        return
    import multiprocessing

    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=start_worker, initargs=(worker_budget(workers),)) as pool:
        yield pool


def worker_budget(workers: int) -> Budget:
    """The memory budget each of ``workers`` local processes simulates under: the
    ``--max-memory-gib`` given (the memory one simulation may take), else an equal share of
    the default budget, so that the workers together stay within what one process would take
    (:func:`sim.budget.default_budget`)."""
    from sim.budget import default_budget, explicit_budget

    return explicit_budget() or default_budget(shared_by=workers)


def in_worker(fn, /, *args):
    """``fn(*args)``, in a worker process that runs nothing but such calls: the collector paused
    while it runs and what survives it (the fabrics, routes and prices the next case reuses)
    frozen after (:func:`gc.freeze`), as only a process that owns its objects may do
    (:func:`sim.runner.simulate` leaves the collector as it found it). In the parent process
    (one worker, :class:`InlineExecutor`) it is ``fn(*args)``."""
    import gc
    import multiprocessing

    if multiprocessing.parent_process() is None:
        return fn(*args)
    gc.disable()
    try:
        return fn(*args)
    finally:
        gc.freeze()
        gc.enable()


def abandon(executor: Executor) -> None:
    """After Ctrl-C: drop what has not started and stop the local workers that still run.

    The caller does not cancel a process pool's futures itself: the pool's manager thread
    fails each future of a pool whose workers are gone, and Python 3.11's raises
    ``InvalidStateError`` (a traceback on stderr) on one that was cancelled (CPython 3.11
    ``Lib/concurrent/futures/process.py``, ``_ExecutorManagerThread.terminate_broken``).
    """
    if not isinstance(executor, ProcessPoolExecutor):
        executor.shutdown(wait=False)  # a Dask executor cancels its futures
        return
    stop = getattr(executor, "terminate_workers", None)  # Python 3.14
    if stop is not None:
        stop()
        return
    # earlier versions keep their processes in a private mapping, which shutdown() drops; the
    # manager thread then finds them gone and fails every pending future (BrokenProcessPool)
    running = list((getattr(executor, "_processes", None) or {}).values())
    manager = getattr(executor, "_executor_manager_thread", None)
    for proc in running:
        proc.terminate()
    executor.shutdown(wait=False)
    if manager is not None:
        # wait for the manager thread to fail the pending futures and close its wake-up pipe:
        # shutdown(wait=False) forgets the thread, so leaving the pool's `with` does not join
        # it, and the interpreter's exit hook (concurrent.futures.process._python_exit) then
        # writes to the pipe while the thread closes it: "OSError: [Errno 9] Bad file
        # descriptor" printed as a traceback (CPython 3.11 _ThreadWakeup.wakeup)
        manager.join(MANAGER_JOIN_S)

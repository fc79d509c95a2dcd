"""Local worker pools that stop with Ctrl-C.

Ctrl-C at a terminal sends SIGINT to the whole foreground process group: the parent and each
worker process of a :class:`~concurrent.futures.ProcessPoolExecutor`. A worker that raised
``KeyboardInterrupt`` would hand it back as the result of its current job and take the next
one, and leaving the pool's ``with`` block waits for every queued job. So the workers ignore
SIGINT (:func:`ignore_sigint`, their initializer) and the parent, which acts on it, cancels
the queued jobs and stops the workers (:func:`abandon`): ``llmsim sweep`` and ``llmsim
validate --jobs N`` return at once.
"""

from __future__ import annotations

import signal
from concurrent.futures import Executor, ProcessPoolExecutor

__all__ = ["abandon", "ignore_sigint"]


def ignore_sigint() -> None:
    """Worker initializer: Ctrl-C reaches the whole process group; only the parent acts on it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


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
    for proc in running:
        proc.terminate()
    executor.shutdown(wait=False)

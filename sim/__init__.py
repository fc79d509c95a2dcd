"""llmsim: a discrete-event simulator of distributed LLM training.

The public API, in the order a simulation uses it::

    from sim import load_workload, load_topology, simulate, make_report, write_chrome_trace
    run = simulate(load_workload("gpt3-175b"), load_topology("dgx-a100"))
    print(make_report(run).iteration_time_s)
    write_chrome_trace(run.result, "trace.json.gz")
"""

from sim.config import load_cases, load_topology, load_workload
from sim.errors import ConfigError, DeadlockError, InfeasibleError, OutOfMemoryError, SimError
from sim.output.report import Report, format_report, make_report
from sim.output.trace import chrome_trace, validate_chrome_trace, write_chrome_trace
from sim.runner import Run, simulate
from sim.version import __version__

__all__ = [
    "ConfigError",
    "DeadlockError",
    "InfeasibleError",
    "OutOfMemoryError",
    "Report",
    "Run",
    "SimError",
    "chrome_trace",
    "format_report",
    "load_cases",
    "load_topology",
    "load_workload",
    "make_report",
    "simulate",
    "validate_chrome_trace",
    "write_chrome_trace",
    "__version__",
]

"""YAML in, specs out: the one place llmsim reads workload and topology files.

A workload file has the format of the published validation cases (``workloads/validation/
README.md``): a mapping with ``model``, ``system``, ``parallel``, ``dtype`` and ``targets``, or a
list of such cases. Where a case leaves a setting null, the loader fills it the way its software
stack (:mod:`sim.config.stacks`, ``workloads/stacks/``) says and records a note saying so
(:func:`load_workload_with_notes`). A topology file gives its
numbers in human units named in the keys (``bandwidth_GBps``, ``latency_us``), converted here
to SI. Every bad input raises :class:`~sim.errors.ConfigError` naming the file and the field.

>>> spec = load_workload("tiny")
>>> spec.parallel.tp, spec.parallel.num_microbatches
(2, 4)
"""

from sim.config.megatron_args import load_megatron_workload
from sim.config.topology import default_topology_name, load_topology
from sim.config.workload import (
                                 DEFAULT_WORKLOAD,
                                 CaseRecord,
                                 load_case_records,
                                 load_cases,
                                 load_workload,
                                 load_workload_with_notes,
)

__all__ = ["DEFAULT_WORKLOAD", "load_workload", "load_workload_with_notes", "load_cases", "load_case_records",
           "CaseRecord",
           "load_topology", "default_topology_name", "load_megatron_workload"]

"""What ``llmsim`` imports to start: NetworkX only where a topology is built as a graph.

A fat tree's runs read the fabric from its spec (:mod:`sim.topology.fattree_index`) and route
from its structure, so a run on one never needs NetworkX, whose import is about a quarter of
the command's start-up (0.41 -> 0.31 s for ``import sim.cli`` on the 2-core machine)."""

from __future__ import annotations

import subprocess
import sys

_RUN = """
import sys
import sim.cli
assert "networkx" not in sys.modules, "imported by sim.cli"
status = sim.cli.main(["run", "tiny", "--topology", "{topology}", "--json", "{out}", "--set", "parallel.dp=4",
                       "--set", "system.num_gpus=16", "--set", "parallel.global_batch_size=16"])
assert status == 0, status
print("networkx" in sys.modules)
"""


def _imports_networkx(topology: str, tmp_path) -> bool:
    code = _RUN.format(topology=topology, out=tmp_path / "r.json")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1] == "True"


def test_a_fat_tree_run_never_imports_networkx(tmp_path):  # two DGX A100 servers under a leaf
    assert not _imports_networkx("dgx-a100", tmp_path)


def test_a_torus_run_builds_its_graph_with_networkx(tmp_path):
    assert _imports_networkx("torus-3d", tmp_path)

"""Shared fixtures: small workloads and topologies built in code."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sim.hardware import get_gpu
from sim.types import RecomputeKind, ScheduleKind
from sim.workload.kernels import KERNEL_KEYS, KernelsSpec
from sim.workload.spec import ModelSpec, ParallelSpec, SystemSpec, WorkloadSpec


def make_workload(*, layers=4, tp=1, pp=1, dp=1, cp=1, vps=1, schedule=ScheduleKind.ONE_F_ONE_B, mbs=1, gbs=8,
                  recompute=RecomputeKind.NONE, sp=False, dist_opt=False, hidden=1024, heads=16, seq=512,
                  vocab=32000, gpu="A100-SXM4-80GB", gpus_per_node=8, tied=False, overlap=True, flash=True,
                  zero=0, experts=0, topk=2, ep=1, shared=0, first_dense=0, capacity=None,
                  recompute_layers=None) -> WorkloadSpec:
    """A small GPT-style workload; every argument is a knob the tests turn (``experts > 1``:
    a mixture of experts of the MLP's width; ``recompute_layers``: the layers of each model chunk
    full recomputation recomputes, ``parallel.recompute_num_layers``)."""
    model = ModelSpec("test-gpt", layers, hidden, heads, heads, 4 * hidden, vocab, seq, tied_embeddings=tied,
                      num_experts=experts, moe_top_k=topk if experts > 1 else 1, num_shared_experts=shared,
                      first_dense_layers=first_dense, moe_capacity_factor=capacity)
    par = ParallelSpec(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, virtual_pipeline_stages=vps, schedule=schedule,
                       sequence_parallel=sp, micro_batch_size=mbs, global_batch_size=gbs,
                       recompute=recompute, distributed_optimizer=dist_opt, overlap_grad_reduce=overlap,
                       zero_stage=zero, recompute_num_layers=recompute_layers)
    return WorkloadSpec("test", model, par, SystemSpec(get_gpu(gpu), tp * pp * dp * cp, gpus_per_node),
                        kernels=KernelsSpec(flash_attention=flash))


def replace_settings(w: WorkloadSpec, **changes) -> WorkloadSpec:
    """``w`` with ``changes`` to its parallel settings and kernel switches
    (:data:`~sim.workload.kernels.KERNEL_KEYS`), each to the spec that holds it."""
    kernels = {k: v for k, v in changes.items() if k in KERNEL_KEYS}
    parallel = {k: v for k, v in changes.items() if k not in KERNEL_KEYS}
    return dataclasses.replace(w, parallel=dataclasses.replace(w.parallel, **parallel),
                               kernels=dataclasses.replace(w.kernels, **kernels))


@pytest.fixture
def workload_factory():
    return make_workload


def load_case_dict(tmp_path: Path, case: dict):
    """``case`` written as a workload file under ``tmp_path`` and loaded as a user's file is:
    the workload and the notes of the defaults filled."""
    import yaml

    from sim.config import load_workload_with_notes
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(case, sort_keys=False))
    return load_workload_with_notes(str(path))


def run_error_line(tmp_path: Path, case: dict, capsys, name: str = "c.yaml") -> tuple[Path, str]:
    """``case`` written as a workload file and run with ``llmsim run``, which must refuse it
    with exit status 2 and one line on stderr: the file's path and that line."""
    import yaml

    from sim.cli import main
    path = tmp_path / name
    path.write_text(yaml.safe_dump(case))
    assert main(["run", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return path, lines[0]


def load_script(path: Path) -> ModuleType:
    """A script outside the package (``benchmarks/``) imported as a module of its file's stem,
    registered in ``sys.modules`` (dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod

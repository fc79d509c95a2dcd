"""The kernel switches as their own spec (:class:`~sim.workload.kernels.KernelsSpec`): read from
a case's ``kernels:`` section or, in the published cases' spelling, from ``parallel:``; a switch
given in both is refused naming both; ``--set kernels.X`` works like ``--set parallel.X``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from sim.config.workload import load_workload, load_workload_with_notes
from sim.errors import ConfigError
from sim.types import LossKind
from sim.workload.kernels import KERNEL_KEYS, KernelsSpec
from sim.workload.spec import ParallelSpec


def _case(tmp_path, **sections):
    raw = yaml.safe_load(Path("workloads/tiny.yaml").read_text())
    for key, value in sections.items():
        raw[key] = {**(raw.get(key) or {}), **value}
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_kernel_keys_are_the_spec_fields_and_left_parallel():
    assert KERNEL_KEYS == tuple(f.name for f in dataclasses.fields(KernelsSpec))
    assert not set(KERNEL_KEYS) & {f.name for f in dataclasses.fields(ParallelSpec)}


def test_kernels_section_is_read(tmp_path):
    w = load_workload(_case(tmp_path, kernels={"flash_attention": False, "cross_entropy": "torch-fp32",
                                               "deterministic": True}))
    assert w.kernels == dataclasses.replace(KernelsSpec(), flash_attention=False,
                                            cross_entropy=LossKind.TORCH_FP32, deterministic=True)


def test_parallel_spelling_and_kernels_section_give_the_same_spec(tmp_path):
    a = load_workload(_case(tmp_path, parallel={"flash_attention": False, "deterministic": True}))
    b = load_workload(_case(tmp_path, kernels={"flash_attention": False, "deterministic": True}))
    assert a == b and not a.kernels.flash_attention and a.kernels.deterministic


def test_a_switch_in_both_places_is_refused_naming_both(tmp_path):
    path = _case(tmp_path, parallel={"flash_attention": True}, kernels={"flash_attention": False})
    with pytest.raises(ConfigError) as exc:
        load_workload(path)
    message = str(exc.value)
    assert exc.value.field == "kernels.flash_attention" and "parallel.flash_attention" in message
    assert "\n" not in message


def test_set_kernels_switch(tmp_path):
    assert not load_workload("tiny", ["kernels.flash_attention=false"]).kernels.flash_attention
    assert not load_workload("tiny", ["parallel.flash_attention=false"]).kernels.flash_attention
    with pytest.raises(ConfigError) as exc:
        load_workload("tiny", ["kernels.flash_attention=3"])
    assert exc.value.field == "kernels.flash_attention" and "(--set)" in exc.value.path


def test_set_in_both_places_is_refused():
    with pytest.raises(ConfigError) as exc:
        load_workload("tiny", ["kernels.deterministic=true", "parallel.deterministic=false"])
    assert "parallel.deterministic" in str(exc.value) and "kernels.deterministic" in str(exc.value)


def test_errors_and_notes_name_the_section_that_gives_the_switch(tmp_path):
    with pytest.raises(ConfigError) as exc:
        load_workload(_case(tmp_path, kernels={"fused_elementwise": "yes"}))
    assert exc.value.field == "kernels.fused_elementwise"
    with pytest.raises(ConfigError) as exc:
        load_workload(_case(tmp_path, parallel={"fused_elementwise": "yes"}))
    assert exc.value.field == "parallel.fused_elementwise"
    # context parallelism without fused attention: the spec's check names where the case said it
    for section in ("parallel", "kernels"):
        with pytest.raises(ConfigError) as exc:
            load_workload(_case(tmp_path, **{section: {"flash_attention": False}}), ["parallel.cp=2",
                                                                                     "parallel.dp=1"])
        assert exc.value.field == f"{section}.flash_attention"
    _, notes = load_workload_with_notes(_case(tmp_path, kernels={"deterministic": False}),
                                        ["stack=megatron-lm-2022", "parallel.flash_attention=null"])
    assert any(n.startswith("kernels.flash_attention: null -> false") for n in notes)

"""The training step's passes over the gradients and master weights beside the Adam kernel
(``kernels.step_passes``, sim/workload/step_passes.py): each stack lists its release's, the
optimizer task moves their bytes, and a bad list is one line and exit 2."""

from __future__ import annotations

import pytest
import yaml

from sim.config import load_topology
from sim.config.stacks import load_stack
from sim.errors import ConfigError
from sim.memory import state_bytes
from sim.runner import simulate
from sim.types import StepPass
from sim.workload.kernels import MEGATRON_CORE_STEP_PASSES
from sim.workload.step_passes import OPTIMIZER_BYTES_PER_PARAM
from tests.conftest import load_case_dict, make_workload, replace_settings, run_error_line

DGX = load_topology("dgx-a100")
MEGATRON_2022 = frozenset({StepPass.ZERO_GRAD_BUFFER, StepPass.GRAD_DIVIDE, StepPass.CLIP_GRAD_NORM,
                           StepPass.MASTER_COPY})


def _optimizer(w):
    run = simulate(w, DGX)
    task = next(t for t in run.program.tasks if t.name == "optimizer")
    span = next(s for s in run.result.spans if s.name == "optimizer")
    return task.op.bytes, span.end_s - span.start_s, run.result.makespan_s


def _state(w):
    sb = state_bytes(w.model, w.parallel, 0, kernels=w.kernels)
    return sb.grads_bytes, sb.optimizer_bytes / 12.0


@pytest.mark.parametrize("dp", [1, 2])
def test_megatron_2022_zeroes_divides_clips_and_copies(dp):
    """Megatron-LM 2022: the fp32 gradient buffer written once (zero) and read and written
    once (divide, at any data-parallel size), the shard's gradients read for the clipping norm
    and its fp32 master weights read for the copy: 3 G + 8 S bytes beside Adam's 30 S."""
    w = replace_settings(make_workload(layers=2, tp=2, dp=dp, gbs=8), step_passes=MEGATRON_2022)
    none = replace_settings(w, step_passes=frozenset())
    grads, shard = _state(w)
    assert grads == pytest.approx(4.0 * shard)  # fp32 gradients of every local weight, no sharding
    with_bytes, with_s, with_iter = _optimizer(w)
    bare_bytes, bare_s, bare_iter = _optimizer(none)
    assert bare_bytes == pytest.approx(OPTIMIZER_BYTES_PER_PARAM * shard, rel=1e-12)
    assert with_bytes - bare_bytes == pytest.approx(3 * grads + 8 * shard, rel=1e-12)
    assert with_s / bare_s == pytest.approx(with_bytes / bare_bytes, rel=0.01)  # bandwidth-bound (+ a launch)
    assert with_iter > bare_iter


def test_megatron_core_divides_only_a_group_of_more_than_one_rank():
    """Megatron-Core's ``gradient_scaling_factor`` of 1 is skipped: one data-parallel rank pays
    zero, NaN check, clipping norm and copy; two ranks the division's read and write too."""
    extra = {}
    for dp in (1, 2):
        w = make_workload(layers=2, tp=2, dp=dp, gbs=8)
        assert w.kernels.step_passes == MEGATRON_CORE_STEP_PASSES  # the kernels' default
        grads, shard = _state(w)
        extra[dp] = (_optimizer(w)[0] - _optimizer(replace_settings(w, step_passes=frozenset()))[0], grads, shard)
    one, grads, shard = extra[1]
    assert one == pytest.approx(2 * grads + 8 * shard, rel=1e-12)
    two, grads2, shard2 = extra[2]
    assert two == pytest.approx(4 * grads2 + 8 * shard2, rel=1e-12)


def test_the_distributed_optimizer_clips_and_copies_its_shard_but_zeroes_the_whole_buffer():
    w = replace_settings(make_workload(layers=2, dp=4, gbs=8, dist_opt=True),
                         step_passes=frozenset({StepPass.ZERO_GRAD_BUFFER, StepPass.MASTER_COPY}))
    grads, shard = _state(w)
    assert grads == pytest.approx(4.0 * 4 * shard)  # the buffer is every weight's, the shard a quarter
    extra = _optimizer(w)[0] - _optimizer(replace_settings(w, step_passes=frozenset()))[0]
    assert extra == pytest.approx(grads + 4 * shard, rel=1e-12)


def test_each_shipped_stack_lists_its_releases_passes():
    assert load_stack("megatron-core").value("step_passes") == MEGATRON_CORE_STEP_PASSES
    for name in ("megatron-lm-2021", "megatron-lm-2022"):
        assert load_stack(name).value("step_passes") == MEGATRON_2022, name
    nemo2 = {StepPass.ZERO_GRAD_BUFFER, StepPass.GRAD_NAN_CHECK, StepPass.CLIP_GRAD_NORM, StepPass.MASTER_COPY}
    assert load_stack("nemo-25").value("step_passes") == nemo2  # average_in_collective: no division
    for name in ("megatron-bridge-25", "megatron-bridge"):  # performance scripts: no NaN check either
        assert load_stack(name).value("step_passes") == nemo2 - {StepPass.GRAD_NAN_CHECK}, name
    for name in ("nemo-24", "nemo-24.01-24.07", "torchtitan"):
        assert load_stack(name).value("step_passes") == {StepPass.CLIP_GRAD_NORM}, name
    assert load_stack("deepspeed-zero3").value("step_passes") == {StepPass.CLIP_GRAD_NORM, StepPass.MASTER_COPY}


def _case(stack: str, **kernels) -> dict:
    return {"name": "probe", "stack": stack, "dtype": "bf16",
            "model": {"name": "probe", "num_layers": 2, "hidden_size": 1024, "num_attention_heads": 16,
                      "vocab_size": 32000, "seq_length": 1024},
            "system": {"gpu": "A100-SXM4-80GB", "num_gpus": 8},
            "parallel": {"tp": 8, "pp": 1, "dp": 1, "micro_batch_size": 1, "global_batch_size": 4},
            **({"kernels": kernels} if kernels else {})}


def test_a_case_takes_its_stacks_passes_noted_and_its_own_list_first(tmp_path):
    w, notes = load_case_dict(tmp_path, _case("megatron-lm-2022"))
    assert w.kernels.step_passes == MEGATRON_2022
    assert any(n.startswith("parallel.step_passes: null -> [zero-grad-buffer, grad-divide, clip-grad-norm, "
                            "master-copy] (stack megatron-lm-2022:") for n in notes)
    core, notes = load_case_dict(tmp_path, _case("megatron-core"))
    assert core.kernels.step_passes == MEGATRON_CORE_STEP_PASSES
    assert not any("step_passes" in n for n in notes)  # the usual value needs no note
    own, _ = load_case_dict(tmp_path, _case("megatron-lm-2022", step_passes=["master-copy"]))
    assert own.kernels.step_passes == {StepPass.MASTER_COPY}
    empty, _ = load_case_dict(tmp_path, _case("megatron-core", step_passes=[]))
    assert empty.kernels.step_passes == frozenset()


@pytest.mark.parametrize("value, expected", [(["fast"], "'zero-grad-buffer'"), ("zero-grad-buffer", "a list of step"),
                                             ([1], "a list of step")])
def test_a_bad_list_is_one_line_naming_the_file_and_field(tmp_path, capsys, value, expected):
    case, line = run_error_line(tmp_path, _case("megatron-core", step_passes=value), capsys)
    assert line.startswith(f"llmsim: error: {case}: kernels.step_passes: expected ")
    assert expected in line


def test_a_stack_file_with_a_bad_list_is_refused_naming_it(tmp_path):
    stack = tmp_path / "mine.yaml"
    stack.write_text(yaml.safe_dump({"name": "mine", "description": "probe", "extends": "megatron-core", "settings": {
        "step_passes": {"value": ["zero-grad-buffer", "nap"], "why": "x", "sources": ["here"]}}}))
    with pytest.raises(ConfigError) as err:
        load_stack(str(stack))
    assert err.value.path == str(stack) and err.value.field == "settings.step_passes.value"


@pytest.mark.parametrize("flags, dropped", [
    ("", set()),
    ("--no-check-for-nan-in-loss-and-grad", {StepPass.GRAD_NAN_CHECK}),
    ("--ddp-average-in-collective", {StepPass.GRAD_DIVIDE_DP}),
    ("--no-check-for-nan-in-loss-and-grad --ddp-average-in-collective", {StepPass.GRAD_NAN_CHECK,
                                                                         StepPass.GRAD_DIVIDE_DP}),
])
def test_megatron_launch_flags_drop_the_passes_they_turn_off(flags, dropped):
    from sim.config.megatron_args import load_megatron_workload

    small = ("--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
             "--micro-batch-size 1 --global-batch-size 8 --vocab-size 32000 --bf16 ")
    w, notes = load_megatron_workload(small + flags, gpu="A100-SXM4-80GB")
    assert w.kernels.step_passes == MEGATRON_CORE_STEP_PASSES - dropped
    assert any(n.startswith("megatron-args: step passes beside Adam:") for n in notes) == bool(dropped)


def test_foreach_adamw_moves_its_eight_passes_bytes():
    """PyTorch's foreach AdamW (torchtitan) reads and writes its operands in eight passes, 84 B
    per fp32 parameter, where the fused kernel moves 30 B; the release's passes come on top."""
    from sim.types import AdamImpl
    from sim.workload.step_passes import FOREACH_ADAMW_BYTES_PER_PARAM

    w = replace_settings(make_workload(layers=2, dp=2, gbs=8), step_passes=frozenset())
    _, shard = _state(w)
    fused = _optimizer(w)[0]
    foreach = _optimizer(replace_settings(w, adam_impl=AdamImpl.FOREACH))[0]
    assert fused == pytest.approx(OPTIMIZER_BYTES_PER_PARAM * shard, rel=1e-12)
    assert foreach == pytest.approx(FOREACH_ADAMW_BYTES_PER_PARAM * shard, rel=1e-12)
    assert FOREACH_ADAMW_BYTES_PER_PARAM == 8 + 12 + 8 + 16 + 8 + 8 + 8 + 16


def test_each_stack_names_its_adam_and_a_case_may_give_its_own(tmp_path, capsys):
    from sim.types import AdamImpl

    assert load_stack("torchtitan").value("adam_impl") is AdamImpl.FOREACH
    for name in ("megatron-core", "megatron-lm-2022", "nemo-24", "nemo-25", "megatron-bridge", "deepspeed-zero3"):
        assert load_stack(name).value("adam_impl") is AdamImpl.FUSED, name
    w, notes = load_case_dict(tmp_path, _case("torchtitan"))
    assert w.kernels.adam_impl is AdamImpl.FOREACH
    assert any(n.startswith("parallel.adam_impl: null -> foreach (stack torchtitan:") for n in notes)
    own, _ = load_case_dict(tmp_path, _case("torchtitan", adam_impl="fused"))
    assert own.kernels.adam_impl is AdamImpl.FUSED
    case, line = run_error_line(tmp_path, _case("megatron-core", adam_impl="apex"), capsys, "bad.yaml")
    assert line.startswith(f"llmsim: error: {case}: kernels.adam_impl: expected ")

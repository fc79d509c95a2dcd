"""Null settings that fit (sim/config/fit.py): when a case's defaults do not fit in the GPU's
memory, the loader takes the cheapest memory savers its framework offers for the settings it
left null, and never changes a setting the case gave."""

from __future__ import annotations

import pytest
import yaml

from sim.cli import main
from sim.config import load_workload, load_workload_with_notes
from sim.errors import ConfigError
from sim.memory import stage_memory
from sim.types import RecomputeKind

SAVER_KEYS = ("distributed_optimizer", "sequence_parallel", "recompute")
LADDER = (  # the savers of a Megatron-LM case, cheapest first, each kept with those before it
    {"distributed_optimizer": False, "sequence_parallel": False, "recompute": "none"},
    {"distributed_optimizer": True, "sequence_parallel": False, "recompute": "none"},
    {"distributed_optimizer": True, "sequence_parallel": True, "recompute": "none"},
    {"distributed_optimizer": True, "sequence_parallel": True, "recompute": "selective"},
    {"distributed_optimizer": True, "sequence_parallel": True, "recompute": "full"},
)


def fits_in_memory(w) -> bool:
    """The report's test (``fits`` in ``llmsim run``'s stage table and ``llmsim memory``)."""
    return all(stage_memory(w, s).fits for s in range(w.parallel.pp))


def peak_memory_bytes(w) -> float:
    return max(stage_memory(w, s).total_bytes for s in range(w.parallel.pp))


def _case(framework: str = "Megatron-LM", **parallel) -> dict:
    """8 layers of a 8192-wide GPT at 4096 tokens, 2 micro-batches of 2 sequences, TP 2 x DP 2
    on A100-80GB, unfused attention (so that selective recomputation saves memory): with
    Megatron-LM's defaults (no distributed optimizer, no sequence parallelism, no
    recomputation) it needs about 110 GiB a GPU."""
    par = {"tp": 2, "pp": 1, "dp": 2, "micro_batch_size": 2, "global_batch_size": 8, "flash_attention": False,
           "sequence_parallel": None, "recompute": None, "distributed_optimizer": None}
    par.update(parallel)
    return {"name": "fit-probe", "framework": framework,
            "model": {"name": "probe", "num_layers": 8, "hidden_size": 8192, "num_attention_heads": 64,
                      "vocab_size": 32000, "seq_length": 4096},
            "system": {"gpu": "A100-SXM4-80GB", "num_gpus": 4, "topology": "dgx-a100"},
            "parallel": par,
            "targets": {"iteration_time_s": {"value": 1.0}}}


def _write(tmp_path, case: dict, name: str = "case.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(case))
    return str(path)


def _explicit(tmp_path, settings: dict):
    return load_workload(_write(tmp_path, _case(**settings), "explicit.yaml"))


def test_null_settings_that_do_not_fit_get_the_cheapest_savers_that_fit(tmp_path):
    fits = [fits_in_memory(_explicit(tmp_path, rung)) for rung in LADDER]
    # the premise: only the fourth rung (distributed optimizer, SP, selective) is the first to fit
    assert fits.index(True) == 3 and not any(fits[:3])
    w, notes = load_workload_with_notes(_write(tmp_path, _case()))
    p = w.parallel
    assert (p.distributed_optimizer, p.sequence_parallel, p.recompute) == (True, True, RecomputeKind.SELECTIVE)
    assert fits_in_memory(w)
    assert peak_memory_bytes(w) == peak_memory_bytes(_explicit(tmp_path, LADDER[3]))
    # one note per setting changed, each saying why; the defaults' notes for them are gone
    for key, shown in (("distributed_optimizer", "true"), ("sequence_parallel", "true"), ("recompute", "selective")):
        mine = [n for n in notes if n.startswith(f"parallel.{key}: null -> ")]
        assert len(mine) == 1 and mine[0].startswith(f"parallel.{key}: null -> {shown} (") and "GiB" in mine[0], mine
    assert "selective fits at" in next(n for n in notes if n.startswith("parallel.recompute"))


def test_a_case_that_fits_keeps_the_recipe_defaults(tmp_path):
    w, notes = load_workload_with_notes(_write(tmp_path, _case(micro_batch_size=1, global_batch_size=4,
                                                               flash_attention=True)))
    assert fits_in_memory(w)
    p = w.parallel
    assert (p.distributed_optimizer, p.sequence_parallel, p.recompute) == (False, False, RecomputeKind.NONE)
    assert ("parallel.recompute: null -> none (stack megatron-core: no recomputation "
            "(Megatron-LM's --recompute-granularity defaults to none))") in notes
    assert not any("memory savers" in n for n in notes)


def test_explicit_settings_are_never_changed(tmp_path):
    # recomputation and SP given: only the distributed optimizer may change, and it does not suffice
    case = _case(recompute="none", sequence_parallel=False)
    w, notes = load_workload_with_notes(_write(tmp_path, case))
    assert (w.parallel.recompute, w.parallel.sequence_parallel) == (RecomputeKind.NONE, False)
    assert w.parallel.distributed_optimizer is False  # nothing fits: the default stays
    assert not fits_in_memory(w)
    assert any(n.startswith("parallel: ") and "does not fit" in n for n in notes)
    # given in full, the configuration is left alone even though it does not fit
    w = _explicit(tmp_path, LADDER[0])
    assert not fits_in_memory(w) and w.parallel.recompute is RecomputeKind.NONE


def test_software_of_2021_offers_full_recomputation_only(tmp_path):
    w, notes = load_workload_with_notes(_write(tmp_path, _case(framework="Megatron-LM (2021)")))
    p = w.parallel
    assert (p.distributed_optimizer, p.sequence_parallel, p.recompute) == (False, False, RecomputeKind.FULL)
    assert p.recompute_num_layers is None  # every layer: the block method came in August 2021
    assert fits_in_memory(w)


# flash attention (selective recomputation then saves nothing), SP and the distributed optimizer
# given: only recomputation is left to fit 8 micro-batch-8 layers in 80 GiB
BLOCK = dict(framework="Megatron-LM (2023)", flash_attention=True, micro_batch_size=8, global_batch_size=32,
             distributed_optimizer=False, sequence_parallel=False)


def test_full_recomputation_of_the_fewest_layers_that_fit(tmp_path):
    w, notes = load_workload_with_notes(_write(tmp_path, _case(**BLOCK)))
    p = w.parallel
    n = p.recompute_num_layers
    assert p.recompute is RecomputeKind.FULL and n is not None and 1 < n < 8
    explicit = [_explicit(tmp_path, dict(BLOCK, recompute="full", recompute_num_layers=k)) for k in (n - 1, n)]
    assert [fits_in_memory(x) for x in explicit] == [False, True]  # the fewest that fit
    assert peak_memory_bytes(w) == peak_memory_bytes(explicit[1])
    assert not fits_in_memory(_explicit(tmp_path, dict(BLOCK, recompute="selective")))  # the premise
    mine = [x for x in notes if x.startswith("parallel.recompute")]
    assert len(mine) == 1 and mine[0].startswith(
        f"parallel.recompute: null -> full, parallel.recompute_num_layers: null -> {n} (none needs "), mine
    assert f"full of {n - 1} of 8 layers a chunk" in mine[0] and f"full of {n} of 8 layers a chunk fits at" in mine[0]


def test_the_bisection_finds_what_a_scan_finds(tmp_path):
    from sim.config.fit import fewest_recomputed_layers

    for mbs in (4, 8, 12, 16, 24):
        w = _explicit(tmp_path, dict(BLOCK, micro_batch_size=mbs, global_batch_size=4 * mbs))
        scan = [k for k in range(1, 9) if fits_in_memory(
            _explicit(tmp_path, dict(BLOCK, micro_batch_size=mbs, global_batch_size=4 * mbs, recompute="full",
                                     recompute_num_layers=k)))]
        n, fitted = fewest_recomputed_layers(w)
        expected = scan[0] if scan and scan[0] < 8 else None
        assert n == expected and fitted.parallel.recompute_num_layers == expected
        assert fits_in_memory(fitted) == bool(scan)


def test_a_given_full_recomputation_keeps_every_layer(tmp_path):
    w, notes = load_workload_with_notes(_write(tmp_path, _case(**dict(BLOCK, recompute="full"))))
    assert w.parallel.recompute is RecomputeKind.FULL and w.parallel.recompute_num_layers is None
    assert not any("memory savers" in n for n in notes)


@pytest.mark.parametrize("framework, fewest", [
    ("Megatron-LM (2023)", True), ("NeMo 24.07 container (Megatron-Core backend)", True),
    ("NeMo 26.04.01 container / Megatron-Bridge (Megatron-Core)", True),
    ("Megatron-LM (2021)", False), ("torchtitan", False),
])
def test_which_frameworks_recompute_the_fewest_layers(framework, fewest):
    from sim.config.defaults import memory_savers
    from sim.config.stacks import choose_stack
    from sim.workload.kernels import KernelsSpec
    from sim.workload.spec import ParallelSpec

    stack = choose_stack(framework).stack
    nulls = frozenset({"recompute", "recompute_num_layers"})
    savers = memory_savers(ParallelSpec(), nulls, stack, KernelsSpec())
    full = [s for s in savers if s.value is RecomputeKind.FULL]
    assert len(full) == 1 and full[0].fewest_layers is fewest
    # a count the case gave is not searched
    given = memory_savers(ParallelSpec(), frozenset({"recompute"}), stack, KernelsSpec())
    assert not any(s.fewest_layers for s in given)


def test_torchtitan_selective_is_its_op_level_policy(tmp_path):
    # torchtitan: FSDP2 already shards (ZeRO-3), SP is on under TP; what is left is recomputation
    case = _case(framework="torchtitan", micro_batch_size=12, global_batch_size=24, flash_attention=True)
    w, notes = load_workload_with_notes(_write(tmp_path, case))
    explicit = [load_workload(_write(tmp_path, dict(case, parallel=dict(case["parallel"], recompute=rc)), "t.yaml"))
                for rc in ("none", "selective", "full")]
    assert [fits_in_memory(x) for x in explicit][:2] == [False, True]  # the premise
    assert w.parallel.recompute is RecomputeKind.SELECTIVE_OP
    assert w.parallel.zero_stage == 3 and w.parallel.sequence_parallel


def test_fits_is_the_reports_test(tmp_path):
    """The loader's "fits" is what ``llmsim memory`` and the run report say: every stage's
    peak at most the GPU's capacity."""
    from sim.config.fit import fits_in_memory as loader_fits

    for rung in LADDER:
        w = _explicit(tmp_path, rung)
        stages = [stage_memory(w, s) for s in range(w.parallel.pp)]
        assert loader_fits(w) == all(s.total_bytes <= w.system.gpu.hbm_capacity_bytes for s in stages)


def test_megatron_fsdp_named_in_the_settings_is_zero3(tmp_path):
    case = _case(micro_batch_size=1, global_batch_size=4, details="Megatron-FSDP, sharding group 2",
                 framework="NeMo 25.11 container / Megatron-Bridge (Megatron-Core)")
    w, notes = load_workload_with_notes(_write(tmp_path, case))
    assert w.parallel.zero_stage == 3
    assert any(n.startswith("parallel.zero_stage: null -> 3 (") and "Megatron-FSDP" in n for n in notes)


@pytest.mark.parametrize("command", ["memory", "run"])
def test_the_choice_is_noted_by_run_and_memory(tmp_path, capsys, command):
    status = main([command, _write(tmp_path, _case())])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "parallel.recompute: null -> selective (" in out
    assert "parallel.recompute: null -> none" not in out


# 17 layers at batch 2 x 4096 with flash attention on A100-80GB: NeMo 24.07's distributed
# optimizer and SP leave it short of memory, with the gradients in fp32
NEMO_24 = dict(framework="NeMo 24.07 container (Megatron-Core backend)", flash_attention=True,
               micro_batch_size=2, global_batch_size=8)


def _nemo_24(tmp_path, name: str = "nemo.yaml", kernels: dict | None = None, **parallel) -> tuple:
    case = _case(**dict(NEMO_24, **parallel))
    case["model"]["num_layers"] = 17
    if kernels is not None:
        case["kernels"] = kernels
    return load_workload_with_notes(_write(tmp_path, case, name))


def test_nemo_1_syncs_gradients_in_bf16_before_it_recomputes(tmp_path):
    """NeMo-Framework-Launcher's configurations that run short of memory sync gradients in BF16
    (``optim.grad_sync_dtype: bf16``) and recompute nothing: the nemo-24 stacks offer 16-bit
    gradients before recomputation, so a case that fits that way runs without recomputing."""
    w, notes = _nemo_24(tmp_path)
    p = w.parallel
    assert (p.distributed_optimizer, p.sequence_parallel, p.recompute) == (True, True, RecomputeKind.NONE)
    assert w.kernels.grad_reduce_in_fp32 is False and fits_in_memory(w)
    # the premise: with fp32 gradients the same settings do not fit
    fp32, _ = _nemo_24(tmp_path, "fp32.yaml", grad_reduce_in_fp32=True, recompute="none", sequence_parallel=True,
                       distributed_optimizer=True)
    assert not fits_in_memory(fp32)
    mine = [n for n in notes if n.startswith("parallel.grad_reduce_in_fp32: null -> ")]
    assert len(mine) == 1 and mine[0].startswith("parallel.grad_reduce_in_fp32: null -> false (true needs "), mine
    assert "fits at" in mine[0]
    # gradients given in fp32, in either section: never changed, recomputation is what is left
    for given in (_nemo_24(tmp_path, "p.yaml", grad_reduce_in_fp32=True),
                  _nemo_24(tmp_path, "k.yaml", kernels={"grad_reduce_in_fp32": True})):
        assert given[0].kernels.grad_reduce_in_fp32 is True
        assert given[0].parallel.recompute is RecomputeKind.FULL
        assert not any(n.startswith("parallel.grad_reduce_in_fp32") for n in given[1])


@pytest.mark.parametrize("framework", ["Megatron-LM (2023)", "NeMo 25.04.rc2 (Megatron-Core)"])
def test_megatron_core_and_nemo_2_do_not_offer_16_bit_gradients(tmp_path, framework):
    """Megatron-Core's and NeMo 2's savers are the distributed optimizer, SP and recomputation:
    the same case keeps its fp32 gradients (and, with 12 bytes of optimizer state a parameter,
    fits no way at all)."""
    w, notes = _nemo_24(tmp_path, framework=framework)
    assert w.kernels.grad_reduce_in_fp32 is True and not w.kernels.master_param_remainders
    assert not any(n.startswith("parallel.grad_reduce_in_fp32") for n in notes)
    assert not fits_in_memory(w) and any("no memory saver of the framework fits" in n for n in notes)


def _unpublished(num_gpus: int = 64, **parallel) -> dict:
    """Llama 3 70B on 64 H200s under NeMo 25.x with no layout published: the defaults (TP 1,
    PP 1, every GPU data-parallel) need some 590 GiB a GPU."""
    par = {"tp": None, "pp": None, "dp": None, "micro_batch_size": None, "global_batch_size": None,
           "sequence_parallel": None, "recompute": None, "distributed_optimizer": None}
    par.update(parallel)
    return {"name": "layout-probe", "framework": "NeMo 25.04",
            "model": {"name": "probe", "num_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
                      "num_kv_heads": 8, "ffn_hidden_size": 28672, "vocab_size": 128256, "seq_length": 8192,
                      "gated_mlp": True, "normalization": "rmsnorm"},
            "system": {"gpu": "H200", "num_gpus": num_gpus, "gpus_per_node": 8},
            "parallel": par}


def test_an_unpublished_layout_takes_the_smallest_model_parallel_size_that_fits(tmp_path):
    """A case that publishes no layout and does not fit with TP 1 and PP 1 runs the smallest
    model-parallel size that fits, TP up to the server's 8 GPUs first (Narayanan et al. 2021,
    Takeaway #1), the rest data-parallel; every smaller size does not fit with the recipe's
    defaults, and the notes say why."""
    w, notes = load_workload_with_notes(_write(tmp_path, _unpublished()))
    p = w.parallel
    assert fits_in_memory(w) and p.tp > 1 and p.tp <= 8 and p.tp * p.pp * p.dp * p.cp == 64
    mp = p.tp * p.pp
    for smaller in (m for m in (1, 2, 4, 8, 16, 32) if m < mp):
        tp = min(smaller, 8)
        probe = load_workload(_write(tmp_path, _unpublished(tp=tp, pp=smaller // tp, recompute="none"), "s.yaml"))
        assert not fits_in_memory(probe), smaller
    tp_note = next(n for n in notes if n.startswith("parallel.tp: null"))
    assert "publishes no data-parallel size and no TP or PP" in tp_note and "Takeaway" in tp_note
    assert any(n.startswith(f"parallel.pp: null -> {p.pp}") for n in notes)
    assert any(n.startswith(f"parallel.dp: null -> {p.dp}") for n in notes)
    assert not any(n.startswith("parallel.tp: null -> 1 (Megatron") for n in notes)


def test_a_published_part_of_the_layout_is_kept(tmp_path):
    """A case that publishes DP keeps the defaults (its model-parallel size is then fixed); one
    that publishes TP or PP keeps it and gets the other chosen, the smallest that fits."""
    w = load_workload(_write(tmp_path, _unpublished(dp=64)))
    assert (w.parallel.tp, w.parallel.pp, w.parallel.dp) == (1, 1, 64) and not fits_in_memory(w)
    w = load_workload(_write(tmp_path, _unpublished(tp=1)))
    assert w.parallel.tp == 1 and w.parallel.pp > 1 and fits_in_memory(w)
    w, notes = load_workload_with_notes(_write(tmp_path, _unpublished(pp=2)))
    assert w.parallel.pp == 2 and w.parallel.tp > 1 and fits_in_memory(w)
    smaller = load_workload(_write(tmp_path, _unpublished(pp=2, tp=w.parallel.tp // 2, recompute="none"), "s.yaml"))
    assert not fits_in_memory(smaller)
    assert any(n.startswith(f"parallel.tp: null -> {w.parallel.tp} (the case publishes no data-parallel size "
                            "and no TP,") for n in notes)


def test_an_unpublished_layout_that_fits_stays_data_parallel(tmp_path):
    """A model that fits on one GPU keeps the defaults: TP 1, PP 1, every GPU data-parallel."""
    case = _unpublished(num_gpus=8)
    case["model"].update(num_layers=2, hidden_size=1024, num_attention_heads=8, num_kv_heads=8,
                         ffn_hidden_size=4096, vocab_size=32000, seq_length=2048)
    w = load_workload(_write(tmp_path, case))
    assert (w.parallel.tp, w.parallel.pp, w.parallel.dp) == (1, 1, 8) and fits_in_memory(w)


def test_an_unpublished_layout_splits_the_query_groups_evenly(tmp_path):
    """Megatron-Core asks TP to divide the query groups: with 4 of them the chosen TP is at most
    4, and pipeline parallelism takes the rest of the model-parallel size."""
    case = _unpublished()
    case["model"]["num_kv_heads"] = 4
    w = load_workload(_write(tmp_path, case))
    assert fits_in_memory(w) and w.parallel.tp <= 4 and 4 % w.parallel.tp == 0 and w.parallel.pp > 1


def test_an_unpublished_layout_divides_a_published_batch(tmp_path):
    """A published global batch smaller than the GPU count cannot be split over every GPU as
    data parallelism: instead of refusing the case, the loader takes the smallest model-parallel
    size whose data-parallel size divides the batch and fits, and says so."""
    case = _unpublished(num_gpus=1024, global_batch_size=512)
    w, notes = load_workload_with_notes(_write(tmp_path, case))
    p = w.parallel
    assert fits_in_memory(w) and p.tp * p.pp * p.dp == 1024 and 512 % (p.dp * p.micro_batch_size) == 0
    assert any("leave the batch undivided" in n for n in notes if n.startswith("parallel.tp: null"))
    case["parallel"]["dp"] = 1024  # a published layout the batch does not divide is still refused
    with pytest.raises(ConfigError) as err:
        load_workload(_write(tmp_path, case, "given.yaml"))
    assert err.value.field == "parallel.global_batch_size"


def test_an_open_layout_of_a_long_sequence_takes_context_parallelism_before_pipelining(tmp_path):
    """At 128k tokens the activations, not the weights, fill the GPU: with CP open too, the
    chosen split takes context parallelism after TP (each rank keeping at least
    MIN_CP_TOKENS of the sequence), where TP and PP alone need full recomputation to fit."""
    from sim.config.layout import MIN_CP_TOKENS

    case = _unpublished(num_gpus=16, cp=None)
    case["system"]["gpu"] = "H100-SXM5-80GB"
    case["model"].update(num_layers=40, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                         ffn_hidden_size=14336, seq_length=131072)
    w, notes = load_workload_with_notes(_write(tmp_path, case))
    p = w.parallel
    assert fits_in_memory(w) and p.cp > 1 and p.recompute is RecomputeKind.NONE
    assert 131072 // p.cp >= MIN_CP_TOKENS and p.tp * p.cp * p.pp * p.dp == 16
    assert any(n.startswith(f"parallel.cp: null -> {p.cp} (") for n in notes)
    case["parallel"]["cp"] = 1  # CP published: TP and PP only, which need recomputation here
    w = load_workload(_write(tmp_path, case, "cp1.yaml"))
    assert w.parallel.cp == 1 and fits_in_memory(w) and w.parallel.recompute is not RecomputeKind.NONE


def test_the_gpus_a_long_sequences_published_layout_leaves_over_are_context_parallel(tmp_path):
    """A case that publishes TP, PP and DP but not CP, on more GPUs than their product, runs the
    rest as context parallelism when its sequence is long enough for it (each rank keeping at
    least MIN_CP_TOKENS tokens); at a short sequence the mismatch is refused, naming the GPU
    count."""
    case = _unpublished(num_gpus=16, tp=4, pp=1, dp=2, cp=None)
    case["model"].update(num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                         ffn_hidden_size=14336, seq_length=131072)
    w, notes = load_workload_with_notes(_write(tmp_path, case))
    assert (w.parallel.tp, w.parallel.pp, w.parallel.dp, w.parallel.cp) == (4, 1, 2, 2)
    assert any(n.startswith("parallel.cp: null -> 2 (system.num_gpus / (tp x pp x dp)") for n in notes)
    case["model"]["seq_length"] = 8192
    with pytest.raises(ConfigError) as err:
        load_workload(_write(tmp_path, case, "short.yaml"))
    assert err.value.field == "system.num_gpus"


def test_a_long_sequence_trades_tensor_for_context_parallelism_within_a_size(tmp_path):
    """torchtitan's loss takes fp32 logits over the whole vocabulary, which TP does not split and
    CP does: at 128k tokens on 8 of Grand Teton's 96 GB H100s, a batch of 2 sequences (the
    torchtitan benchmark's CP 4 row), the chooser keeps the smallest size the batch divides and
    trades TP for CP (the widest TP of that size does not fit, recomputation and all)."""
    case = _unpublished(num_gpus=8, cp=None, global_batch_size=2, micro_batch_size=1)
    case.update(framework="torchtitan")
    case["system"]["gpu"] = "H100-SXM5-96GB-HBM2e"
    case["model"].update(num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                         ffn_hidden_size=14336, seq_length=131072)
    w, notes = load_workload_with_notes(_write(tmp_path, case))
    p = w.parallel
    assert fits_in_memory(w) and p.cp > 1 and p.tp * p.cp * p.pp * p.dp == 8
    size = p.tp * p.cp * p.pp
    widest = dict(case, parallel=dict(case["parallel"], tp=min(size, 8), pp=size // min(size, 8), cp=1))
    assert not fits_in_memory(load_workload(_write(tmp_path, widest, "widest.yaml")))
    assert any(n.startswith(f"parallel.cp: null -> {p.cp} (") for n in notes)
    assert any(n.startswith(f"parallel.tp: null -> {p.tp} (") and "narrower TP with more of the size as CP" in n
               for n in notes)


def test_an_open_layouts_tensor_parallelism_divides_the_mlp_width(tmp_path):
    """Megatron-Core's column-parallel linear layer splits the MLP's width over TP: with a width
    no TP above 1 divides, the chooser pipelines at TP 1 and fits, where every split it tried
    was TP 8 and refused."""
    case = _unpublished()
    case["model"]["ffn_hidden_size"] = 28673
    w, notes = load_workload_with_notes(_write(tmp_path, case))
    p = w.parallel
    assert fits_in_memory(w) and 28673 % p.tp == 0 and p.pp > 1
    assert any(n.startswith(f"parallel.pp: null -> {p.pp} (") for n in notes)

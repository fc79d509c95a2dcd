"""A case's framework named without a date is taken as of its publication
(:func:`sim.config.workload._dated_framework`), and the era defaults follow."""

from __future__ import annotations

from pathlib import Path

import yaml

from sim.config import load_case_records
from sim.config.fields import Notes
from sim.config.workload import _dated_framework


def test_undated_framework_takes_the_publication_year():
    notes = Notes()
    src = {"publication": "Narayanan et al., SC21 (arXiv:2104.04473)", "url": "https://arxiv.org/abs/2104.04473"}
    assert _dated_framework("Megatron-LM", src, notes) == "Megatron-LM (as of 2021)"
    assert len(notes) == 1 and "2021" in notes[0]
    # a year in the publication text wins over a later arXiv identifier
    assert _dated_framework("X", {"publication": "Some paper, 2020", "url": "arxiv.org/abs/2203.00001"},
                            Notes()) == "X (as of 2020)"


def test_dated_or_unsourced_framework_is_left_alone():
    notes = Notes()
    src = {"url": "https://arxiv.org/abs/2104.04473"}
    assert _dated_framework("Megatron-LM (2022)", src, notes) == "Megatron-LM (2022)"
    assert _dated_framework("NeMo 24.03.01 (Megatron-Core)", {"repo": "NVIDIA/NeMo"}, notes) == \
        "NeMo 24.03.01 (Megatron-Core)"
    assert _dated_framework("torchtitan", None, notes) == "torchtitan"
    assert not notes


def test_narayanan_table_2_runs_with_2021_software():
    """Table 2's framework text has no date; the paper is from 2021, so its PTD-P rows run
    without FlashAttention, overlapped gradient reduction or gradient-accumulation fusion, as
    the same paper's dated Table 1 rows do."""
    path = "workloads/validation/narayanan2021.yaml"
    text = {c["id"]: c["framework"] for c in yaml.safe_load(Path(path).read_text())}
    recs = [r for r in load_case_records(path) if "_t2_ptdp_" in r.id]
    assert recs and all("20" not in text[r.id] for r in recs)
    for r in recs:
        p, k = r.workload.parallel, r.workload.kernels
        assert (k.flash_attention, p.overlap_grad_reduce, k.gradient_accumulation_fusion) == (False, False, False)
        assert any("as of its publication" in n or "carries no date" in n for n in r.notes)


def test_nemo_and_megatron_bridge_runs_use_their_recipes_distributed_optimizer():
    """NeMo's and Megatron-Bridge's recipes build the optimizer with
    ``use_distributed_optimizer=True`` and overlap its parameter gather; Megatron-LM's launch
    default is off, and a case's own value wins either way."""
    for path in ("workloads/validation/nemo2407.yaml", "workloads/validation/megatronbridge.yaml",
                 "workloads/validation/nemo-longseq.yaml"):
        for rec in load_case_records(path):
            p = rec.workload.parallel
            assert p.distributed_optimizer and p.overlap_param_gather, rec.id
    for rec in load_case_records("workloads/validation/korthikanti2022.yaml"):
        assert not rec.workload.parallel.distributed_optimizer, rec.id

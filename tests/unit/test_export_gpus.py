"""The export GPUs H800 and A800 and their HGX topologies: the H100 SXM5 and A100 SXM4 80GB with
NVLink cut to 400 GB/s bidirectional (sim/hardware.py, topologies/hgx-h800.yaml, hgx-a800.yaml)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from sim.cli import main
from sim.config import load_workload_with_notes
from sim.config.topology import default_topology_name, load_topology
from sim.hardware import get_gpu
from sim.output.report import make_report
from sim.runner import simulate
from sim.studies.validate import case_topology
from sim.types import Dtype
from sim.units import GBPS

PARENTS = {"H800-SXM5-80GB": "H100-SXM5-80GB", "A800-SXM4-80GB": "A100-SXM4-80GB"}


@pytest.mark.parametrize("alias,name", [
    ("H800", "H800-SXM5-80GB"), ("h800 sxm", "H800-SXM5-80GB"), ("H800-80GB", "H800-SXM5-80GB"),
    ("h800_sxm_80gb", "H800-SXM5-80GB"), ("H800-SXM5-80GB", "H800-SXM5-80GB"),
    ("A800", "A800-SXM4-80GB"), ("A800-80GB", "A800-SXM4-80GB"), ("a800 sxm", "A800-SXM4-80GB"),
    ("A800 SXM 80GB", "A800-SXM4-80GB"), ("a800-sxm4-80gb", "A800-SXM4-80GB"),
])
def test_the_export_gpus_aliases_resolve(alias, name):
    assert get_gpu(alias).name == name


@pytest.mark.parametrize("name", sorted(PARENTS))
def test_an_export_gpu_is_its_parent_with_nvlink_at_200_gbps_a_direction(name):
    """Compute, memory, kernels and power are the parent's; only NVLink (and the name and
    sources) differ."""
    gpu, parent = get_gpu(name), get_gpu(PARENTS[name])
    assert gpu.nvlink_bandwidth_bytes_per_s == 200 * GBPS < parent.nvlink_bandwidth_bytes_per_s
    assert gpu.peak(Dtype.BF16) == parent.peak(Dtype.BF16)
    assert gpu.hbm_capacity_bytes == parent.hbm_capacity_bytes
    assert gpu.hbm_bandwidth_bytes_per_s == parent.hbm_bandwidth_bytes_per_s
    assert gpu.generation is parent.generation and gpu.power == parent.power
    assert gpu.sources and gpu.sources != parent.sources
    assert dataclasses.replace(gpu, name=parent.name, sources=parent.sources,
                               nvlink_bandwidth_bytes_per_s=parent.nvlink_bandwidth_bytes_per_s) == parent


@pytest.mark.parametrize("gpu,preset,dgx", [("H800", "hgx-h800", "dgx-h100"), ("A800", "hgx-a800", "dgx-a100")])
def test_an_export_gpu_runs_on_its_hgx_preset_at_its_own_nvlink(gpu, preset, dgx):
    assert default_topology_name(gpu) == preset
    topo, full = load_topology(preset), load_topology(dgx)
    assert topo.gpu == get_gpu(gpu).name
    assert topo.scale_up.link.bandwidth_bytes_per_s == 200 * GBPS
    assert topo.scale_up.link.bandwidth_bytes_per_s < full.scale_up.link.bandwidth_bytes_per_s
    # the DGX part's curve, latencies and scale-out, as fractions of the slower link
    assert topo.scale_up.link.efficiency == full.scale_up.link.efficiency
    assert topo.scale_up.link.latency_s == full.scale_up.link.latency_s
    assert topo.scale_up.collective_latency_s == full.scale_up.collective_latency_s
    assert topo.scale_out == full.scale_out


def test_hgx_h800_has_half_or_less_of_dgx_h100s_nvlink_and_no_nvls():
    h800, h100 = load_topology("hgx-h800"), load_topology("dgx-h100")
    assert h800.scale_up.link.bandwidth_bytes_per_s <= h100.scale_up.link.bandwidth_bytes_per_s / 2
    assert h100.scale_up.nvls_efficiency is not None and h800.scale_up.nvls_efficiency is None


def _tp_heavy(tmp_path: Path) -> Path:
    """A Llama-3-70B-wide slice at TP 8 on one node: its TP all-reduces are what NVLink carries."""
    doc = yaml.safe_load(Path("workloads/tiny.yaml").read_text())
    doc["system"].pop("topology")
    doc["model"].update(num_layers=4, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
                        ffn_hidden_size=28672, gated_mlp=True, seq_length=4096)
    doc["parallel"].update(tp=8, pp=1, dp=1, sequence_parallel=True, micro_batch_size=1, global_batch_size=2)
    path = tmp_path / "tp8.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("export,parent", [("H800", "H100"), ("A800", "A100")])
def test_a_tp_heavy_job_exposes_more_tp_communication_on_the_export_gpu(tmp_path, export, parent):
    path = _tp_heavy(tmp_path)
    reports = {}
    for g in (export, parent):
        w, _ = load_workload_with_notes(str(path), [f"system.gpu={g}"])
        topo = case_topology(w)
        assert topo.name == default_topology_name(g)
        reports[g] = make_report(simulate(w, topo))
    slow, fast = reports[export], reports[parent]
    assert slow.exposed_comm_s["tp"] > 1.3 * fast.exposed_comm_s["tp"] > 0
    assert slow.iteration_time_s > fast.iteration_time_s
    assert slow.compute_s["gemm"] == pytest.approx(fast.compute_s["gemm"], rel=0.05)


def _all_reduce(capsys, topology: str, algo: str = "auto") -> dict:
    assert main(["collective", "--topology", topology, "--ranks", "8", "--bytes", "1GiB",
                 "--algo", algo, "--json", "-"]) == 0
    return json.loads(capsys.readouterr().out)


def test_an_8_gpu_all_reduce_on_hgx_h800_takes_about_450_over_200_of_dgx_h100s(capsys):
    """Ring against ring (hgx-h800 gives no NVLS): the same curve over 200 GB/s instead of 450,
    and a bus bandwidth near the 160 GB/s DeepSeek-V3 reports on H800 (arXiv 2412.19437)."""
    h800 = _all_reduce(capsys, "hgx-h800")
    assert h800["algorithm"] == "ring"
    h100_ring = _all_reduce(capsys, "dgx-h100", "ring")
    assert 2.0 < h800["time_s"] / h100_ring["time_s"] < 2.5
    assert 150e9 < h800["busbw_bytes_per_s"] < 165e9
    # dgx-h100 left to pick runs NVLS, further ahead still
    h100 = _all_reduce(capsys, "dgx-h100")
    assert h100["algorithm"] == "nvls" and h800["time_s"] / h100["time_s"] > 2.5

"""cuDNN's fused attention on Blackwell and Hopper, by cuDNN release.

The catalogue prices cuDNN attention on Blackwell with curves from cuDNN 9.19
(:mod:`sim.hardware`, :func:`~sim.hardware.cudnn_919_fractions`). A software stack that ships
an earlier cuDNN runs slower kernels there: the same benchmark of NVIDIA's, run through
PyTorch's cuDNN SDPA backend with the NGC PyTorch containers of 2025, times B200's backward at
0.81-0.89 of what the 9.19 curves give at 8k-128k tokens (forward 0.93-1.05), and cuDNN 9.18.1
is the release whose SDPA improvements the benchmark's results were updated for
(NVIDIA/cudnn-frontend release v1.18.0: "Updated the benchmark results for the sdpa
improvements added in cuDNN 9.18.1"). So a stack's
``cudnn_release`` (:mod:`sim.config.stack`) picks the attention curves of a Blackwell GPU:

* from :data:`CATALOGUE_FROM` (9.18) on, or null: the catalogue's;
* before it: the latest release measured (:data:`MEASURED`) that is not later than the stack's,
  or, for a release older than every measurement, the earliest one (noted).

Each measurement is NVIDIA's cuDNN-frontend SDPA training benchmark
(``benchmark/sdpa_benchmark_training/benchmark_bf16_sdpa.py``): batch 1, 128 query and 8
key/value heads, head dimension 128, causal, BF16, at 2k-128k tokens, backend ``pyt_cudnn``
(``F.scaled_dot_product_attention`` on PyTorch's cuDNN backend, the kernels Transformer Engine's
fused attention calls), timed with CUDA events: the way this project's own H100 curve was
measured (PyTorch's cuDNN SDPA, device-timed), so the fractions are used as they are. A point
is the kernel's FLOPs as :class:`~sim.workload.ops.AttentionOp` counts them over ``(time -
launch gap) x the GPU's dense BF16 peak``. GB200 (B200's die at a higher power limit) takes
B200's fractions, as B200 takes GB200's in the catalogue.

Hopper's catalogue curves are cuDNN 9.19 too (our H100, and H200; :mod:`sim.hardware`), and the
same rule picks a Hopper GPU's curves from :data:`HOPPER_MEASURED`: NVIDIA's earlier attention
benchmark of the cuDNN frontend (``benchmark/benchmark_flash_attention.py``, 2024), run on H200
with its clocks locked at 1980 MHz (the README's ``nvidia-smi -ac 3201,1980``) against the newest
cuDNN of the day, 9.1.0 in May 2024 and 9.4.0 in September: 16 heads of dimension 128, causal,
BF16, 4 x 4k to 1 x 64k tokens. That harness is not the one the 9.19 curves come from, so a
release is priced by its ratio, not its own fractions: each point's achieved fraction over the
fraction H200 reached with cuDNN 9.19 at the same FLOPs (NVIDIA's 9.19 benchmark,
:func:`sim.hardware.cudnn_919_fractions`, interpolated in log(FLOPs)), which multiplies the GPU's
own catalogue curve, interpolated in log(FLOPs) between the points and held at the end ones.
cuDNN 9.1's forward reaches 0.83-0.95 of 9.19's and its backward 0.87-0.97; 9.4's forward
0.92-1.07 (it gained 10-13% on 9.1's) and its backward 0.87-0.95, the longest sequences
slowest. Ampere keeps its curves: its attention is FlashAttention-2 or unfused, not cuDNN's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TypeVar

from sim.hardware import EfficiencyCurve, GPUSpec, cudnn_919_fractions, get_gpu
from sim.types import Dtype, GpuGeneration
from sim.workload.ops import AttentionOp

__all__ = ["CATALOGUE_FROM", "HOPPER_MEASURED", "HopperMeasurement", "HopperPoint", "MEASURED", "MEASURED_SEQS",
           "PRICED_AS", "ReleaseMeasurement", "format_release", "parse_release", "with_cudnn_release"]

MEASURED_SEQS = (2048, 4096, 8192, 16384, 32768, 65536, 131072)
"""The sequence lengths of every measurement (batch 1, 128/8 heads, head dimension 128, causal)."""
CATALOGUE_FROM = (9, 18)
"""The first release the catalogue's Blackwell curves (cuDNN 9.19) price: the benchmark's
results were updated for 9.18.1's SDPA improvements (cudnn-frontend v1.18.0 release notes)."""
PRICED_AS = {"B200": "B200", "GB200": "B200", "GB300": "GB300"}
"""The GPUs priced by release, and the GPU whose measurements price each."""


@dataclass(frozen=True)
class ReleaseMeasurement:
    """One cuDNN release's attention measured on one GPU: forward and backward milliseconds at
    :data:`MEASURED_SEQS`, and where they were published."""

    gpu: str
    release: tuple[int, int]
    label: str
    forward_ms: tuple[float, ...]
    backward_ms: tuple[float, ...]
    source: str

    def curves(self) -> tuple[EfficiencyCurve, EfficiencyCurve]:
        """The forward and backward efficiency curves: fractions of the dense BF16 peak of the
        GPU measured."""
        gpu = get_gpu(self.gpu)
        peak = gpu.peak(Dtype.BF16)
        out = []
        for backward, times in ((False, self.forward_ms), (True, self.backward_ms)):
            points = []
            for seq, ms in zip(MEASURED_SEQS, times):
                flops = AttentionOp(1, 128, 8, seq, 128, True, backward).flops
                points.append((flops, flops / ((ms * 1e-3 - gpu.kernel_launch_s) * peak)))
            out.append(EfficiencyCurve(tuple(points)))
        return out[0], out[1]


_FRONTEND = "NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/artifacts/"
MEASURED = (
    ReleaseMeasurement(
        "B200", (9, 10), "9.10.2",
        (0.283, 0.629, 1.837, 6.517, 24.611, 97.192, 423.196),
        (0.935, 1.978, 5.849, 20.498, 78.227, 332.507, 1375.057),
        _FRONTEND + "sdpa_bf16_benchmark_results_NVIDIA_B200.csv @cb560b9, backend pyt_cudnn; cuDNN 9.10.2 in the "
        "NGC PyTorch 25.06 container (sample_b200_bf16_run.txt: torch 2.8.0a0 nv25.06, "
        "torch.backends.cudnn.version() = 91002)"),
    ReleaseMeasurement(
        "B200", (9, 13), "9.13.0",
        (0.287, 0.642, 1.877, 6.602, 24.795, 101.812, 415.333),
        (0.925, 1.960, 5.833, 20.460, 79.338, 327.889, 1343.117),
        _FRONTEND + "sdpa_bf16_benchmark_results_NVIDIA_B200.csv @bb37575, backend pyt_cudnn; cuDNN 9.13.0 in the "
        "NGC PyTorch 25.09 container (sample_b200_bf16_run.txt @bb37575: torch 2.9.0a0 nv25.09, "
        "torch.backends.cudnn.version() = 91300)"),
    ReleaseMeasurement(
        "GB300", (9, 13), "9.13.0",
        (0.232, 0.480, 1.470, 5.167, 19.592, 79.491, 327.134),
        (0.705, 1.540, 4.865, 17.345, 66.679, 270.296, 1099.493),
        _FRONTEND + "sdpa_bf16_benchmark_results_NVIDIA_GB300.csv @bb37575, backend pyt_cudnn; cuDNN 9.13.0 in the "
        "NGC PyTorch 25.09 container (sample_gb300_bf16_run.txt @0b1577c: torch 2.9.0a0 nv25.09, "
        "torch.backends.cudnn.version() = 91300)"),
)
"""The per-release measurements, oldest first per GPU."""


@dataclass(frozen=True)
class HopperPoint:
    """One shape of the 2024 benchmark: ``batch`` sequences of ``seq`` tokens, 16 heads of
    dimension 128, causal, and the TFLOP/s it published forward and backward (its FLOPs:
    ``4 batch seq^2 16 x 128 / 2`` forward, 2.5 times that backward)."""

    batch: int
    seq: int
    forward_tflops: float
    backward_tflops: float

    def op(self, backward: bool) -> AttentionOp:
        return AttentionOp(self.batch, 16, 16, self.seq, 128, True, backward)

    def ratio(self, backward: bool) -> tuple[float, float]:
        """``(FLOPs as AttentionOp counts them, achieved fraction over cuDNN 9.19's on H200 at
        those FLOPs)``; H200's peak cancels."""
        published = 4.0 * self.batch * self.seq**2 * 16 * 128 / 2 * (2.5 if backward else 1.0)
        seconds = published / ((self.backward_tflops if backward else self.forward_tflops) * 1e12)
        flops = self.op(backward).flops
        peak = get_gpu("H200").peak(Dtype.BF16)
        reference = EfficiencyCurve(cudnn_919_fractions("H200", backward))
        return flops, flops / (seconds * peak) / reference(flops)


@dataclass(frozen=True)
class HopperMeasurement:
    """One cuDNN release's attention measured on H200 by the 2024 benchmark (module docstring)."""

    release: tuple[int, int]
    label: str
    points: tuple[HopperPoint, ...]
    source: str

    def on(self, gpu: GPUSpec) -> GPUSpec:
        """``gpu`` with its catalogue curves times this release's ratios: forward, backward and,
        where the GPU has one, the deterministic backward (cuDNN's own algorithm, a slowdown of
        the same kernel)."""
        fwd = tuple(p.ratio(False) for p in self.points)
        bwd = tuple(p.ratio(True) for p in self.points)
        det = gpu.deterministic_attention_backward_efficiency
        return dataclasses.replace(
            gpu, attention_efficiency=gpu.attention_efficiency.times(fwd),
            attention_backward_efficiency=gpu.attention_backward_efficiency.times(bwd),
            deterministic_attention_backward_efficiency=None if det is None else det.times(bwd))


_FRONTEND_2024 = "NVIDIA/cudnn-frontend benchmark/benchmark_results.csv "
HOPPER_MEASURED = (
    HopperMeasurement(
        (9, 1), "9.1.0",
        (HopperPoint(4, 4096, 542.3175668926519, 443.6033150228602),
         HopperPoint(2, 8192, 572.8628678140092, 463.5408134793645),
         HopperPoint(1, 16384, 586.8151359973481, 497.67958736481233),
         HopperPoint(1, 32768, 577.3478523124705, 499.6635003500654),
         HopperPoint(1, 65536, 567.0220986793877, 503.80652594122864)),
        _FRONTEND_2024 + "@b740542 (2024-05-07), causal rows; README.md @b740542: 'cudnn backend version : "
        "90100', clocks locked with nvidia-smi -ac 3201,1980 (H200); Dockerfile: NGC PyTorch 24.03 with the "
        "newest cudnn package installed over it"),
    HopperMeasurement(
        (9, 4), "9.4.0",
        (HopperPoint(4, 4096, 613.49, 438.45), HopperPoint(2, 8192, 645.95, 461.89),
         HopperPoint(1, 16384, 649.99, 488.56), HopperPoint(1, 32768, 636.08, 504.14),
         HopperPoint(1, 65536, 631.20, 508.07)),
        _FRONTEND_2024 + "@de355c7 (2024-09-23, cuDNN frontend 1.7.0: 'Updated benchmark numbers with cudnn "
        "9.4.0'), causal rows; Dockerfile: NGC PyTorch 24.07 with the newest cudnn package installed over it"),
)
"""The per-release measurements of Hopper, oldest first."""


def parse_release(text: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a cuDNN release written ``9.13`` (or ``9.13.0``); None when it is not one.

    >>> parse_release("9.13"), parse_release("9.10.2"), parse_release("nine")
    ((9, 13), (9, 10), None)
    """
    parts = text.split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() and len(p) <= 3 for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def format_release(release: tuple[int, int]) -> str:
    return f"{release[0]}.{release[1]}"


def with_cudnn_release(gpu: GPUSpec, release: tuple[int, int] | None) -> tuple[GPUSpec, str | None]:
    """``gpu`` with the cuDNN attention curves of ``release`` (the module docstring), and a note
    saying which measurement prices it; ``gpu`` itself and None where the catalogue's apply.

    >>> from sim.hardware import get_gpu
    >>> b200, note = with_cudnn_release(get_gpu("B200"), (9, 13))
    >>> note
    'attention: cuDNN 9.13 on B200 -> cuDNN 9.13.0 as measured on B200 (sim/attention_releases.py)'
    >>> with_cudnn_release(get_gpu("A100"), (9, 13))[1] is None, with_cudnn_release(b200, (9, 19))[1] is None
    (True, True)
    """
    if release is None or release >= CATALOGUE_FROM:
        return gpu, None
    if gpu.generation is GpuGeneration.HOPPER:
        return _hopper(gpu, release)
    measured_on = PRICED_AS.get(gpu.name)
    if measured_on is None:
        return gpu, None
    m, older = _latest_not_later(tuple(m for m in MEASURED if m.gpu == measured_on), release)
    fwd, bwd = m.curves()
    on = "" if m.gpu == gpu.name else f" (its fractions of peak on {gpu.name})"
    note = (f"attention: cuDNN {format_release(release)} on {gpu.name} -> cuDNN {m.label} as measured on "
            f"{m.gpu}{on}{older} (sim/attention_releases.py)")
    return dataclasses.replace(gpu, attention_efficiency=fwd, attention_backward_efficiency=bwd), note


def _hopper(gpu: GPUSpec, release: tuple[int, int]) -> tuple[GPUSpec, str]:
    """``gpu`` (Hopper) with its catalogue curves times the ratios of the latest release of
    :data:`HOPPER_MEASURED` not later than ``release`` (the earliest for an older one), noted."""
    m, older = _latest_not_later(HOPPER_MEASURED, release)
    note = (f"attention: cuDNN {format_release(release)} on {gpu.name} -> its cuDNN 9.19 curves times cuDNN "
            f"{m.label}'s rate over 9.19's as measured on H200{older} (sim/attention_releases.py)")
    return m.on(gpu), note


_Measured = TypeVar("_Measured", ReleaseMeasurement, HopperMeasurement)


def _latest_not_later(measured: tuple[_Measured, ...], release: tuple[int, int]) -> tuple[_Measured, str]:
    """The latest of ``measured`` (oldest first) not later than ``release``, or the earliest for
    an older release, and the note's words for that case."""
    earlier = [m for m in measured if m.release <= release]
    return (earlier[-1], "") if earlier else (measured[0], ", no earlier release measured")

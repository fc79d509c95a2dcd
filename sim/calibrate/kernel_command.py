"""The ``--kernels`` part of ``llmsim calibrate``: the GPU chosen, the table read and fitted,
the report printed, the file's ``kernels`` section made.

The GPU the kernels were measured on is ``--gpu``'s; else the one ``--topology``'s file fixes
(``gpu: B200`` in ``topologies/dgx-b200.yaml``); else the GPU of the nccl-tests log that
calibrates the topology; else the one the table's ``# device:`` comment (a trace's
``deviceProperties``) names, where that names one catalogue GPU. None of them: one line asking
for ``--gpu``. A table whose device names another GPU than the one chosen is refused (its
efficiencies would be fractions of another GPU's peak).
"""

from __future__ import annotations

import math
import re
import statistics

from sim.calibrate.kernel_section import KernelSection
from sim.calibrate.kernel_table import KernelTable
from sim.calibrate.kernels import KernelFit, fit_kernels, read_kernels
from sim.calibrate.nccl_tests import NcclTestsLog
from sim.config import load_topology
from sim.errors import ConfigError, Described
from sim.hardware import GPUSpec, get_gpu, gpu_names
from sim.types import Dtype

__all__ = ["GPU_WORDS", "calibrate_kernels", "device_gpu", "kernel_gpu"]

GPU_WORDS = (("GB300", "GB300"), ("GB200", "GB200"), ("B200", "B200"), ("H200", "H200"), ("H100", "H100"),
             ("A100", "A100"))
"""Words of device names (``NVIDIA H100 80GB HBM3``) and the catalogue GPU each names."""
POINTS_PER_LINE = 8
"""Curve points per printed line."""
_NOT_SXM = re.compile(r"\b(PCIe|NVL)\b", re.I)
"""Device-name words of parts the catalogue does not have (H100 PCIe, H100 NVL: other peaks)."""


def device_word(device: str) -> str | None:
    """The GPU word of a device name (``H100`` for ``NVIDIA H100 80GB HBM3``), None for none."""
    for word, _ in GPU_WORDS:
        if re.search(rf"\b{word}\b", device.replace("-", " ")):
            return word
    return None


def device_gpu(device: str) -> str | None:
    """The catalogue GPU a device name names, None where it names none or a part the
    catalogue does not have (PCIe, NVL)."""
    word = device_word(device)
    if word is None or _NOT_SXM.search(device):
        return None
    return get_gpu(dict(GPU_WORDS)[word]).name


def kernel_gpu(gpu: str | None, topology: str | None, log: NcclTestsLog | None,
               table: KernelTable) -> tuple[GPUSpec, str]:
    """The GPU the kernels were measured on, and how it was chosen (the module docstring).

    Raises
    ------
    ConfigError
        For an unknown ``--gpu``, no GPU determined, or a table measured on another GPU.
    """
    how = None
    name = None
    if gpu is not None:
        try:
            name, how = get_gpu(gpu).name, "--gpu"
        except KeyError:
            raise ConfigError("<--gpu>", "--gpu", f"a GPU of the catalogue, one of {gpu_names()}", gpu) from None
    elif topology is not None and load_topology(topology).gpu is not None:
        name, how = get_gpu(load_topology(topology).gpu).name, f"the GPU of topology {topology}"  # type: ignore[arg-type]
    elif log is not None and any(device_gpu(d) for d in log.devices):
        name = next(g for d in log.devices if (g := device_gpu(d)) is not None)
        how = f"the GPU of {log.name}"
    elif table.device is not None and device_gpu(table.device) is not None:
        name = device_gpu(table.device)
        how = f"the {'table' if table.form == 'table' else 'trace'}'s device, {table.device}"
    if name is None or how is None:
        said = (f"a table measured on {table.device!r}, not a catalogue GPU" if table.device
                else "a table that names no device (no '# device: NAME' line)")
        raise ConfigError(table.path, "--gpu", f"the GPU the kernels were measured on: --gpu NAME, one of "
                          f"{gpu_names()} (neither --topology nor nccl-tests logs name one)", Described(said))
    word = device_word(table.device) if table.device else None
    if word is not None and device_word(name) != word:
        raise ConfigError(table.path, "device", f"kernels measured on {name} ({how}): the efficiencies are fractions "
                          f"of its peaks", table.device)
    return get_gpu(name), how


def calibrate_kernels(path: str, gpu: str | None, topology: str | None, log: NcclTestsLog | None) -> KernelSection:
    """Read, fit and print ``--kernels PATH``; the file's ``kernels`` section."""
    table = read_kernels(path)
    spec, how = kernel_gpu(gpu, topology, log, table)
    fit = fit_kernels(table, spec)
    _print(fit, how)
    dtypes = sorted({d for d, _ in spec.peak_flops_per_s}, key=lambda d: d.value)
    used = {v.key[len("gemm_"):] if v.key.startswith("gemm_") else Dtype.BF16.value for v in fit.values}
    peaks = tuple((d.value, spec.peak(d) / 1e12) for d in dtypes if d.value in used)
    return KernelSection(spec.name, path, table.device, spec.kernel_launch_s * 1e6, peaks, fit.values,
                         table.skipped + fit.dropped, fit.check)


def _count(table: KernelTable) -> str:
    parts = []
    if table.gemms:
        parts.append(f"{len(table.gemms)} GEMM{'s' if len(table.gemms) > 1 else ''}")
    if table.attention:
        parts.append(f"{len(table.attention)} attention kernel{'s' if len(table.attention) > 1 else ''}")
    form = "a kernel table" if table.form == "table" else "a PyTorch profiler trace"
    where = f"; measured on {table.device}" if table.device else ""
    return f"{' and '.join(parts)} ({form}{where})"


def _pct(x: float) -> str:
    return f"{round(x, 3) + 0.0:+.1%}"  # + 0.0: no -0.0%


def _print(fit: KernelFit, how: str) -> None:
    table, gpu = fit.table, fit.gpu
    print(f"llmsim calibrate: {table.path}: {_count(table)}")
    for why in table.skipped:
        print(f"  not used: {why}")
    peaks = ", ".join(f"{d.value} {p / 1e12:g}" for d, p in gpu.peak_flops_per_s
                      if any(v.key == f"gemm_{d.value}" for v in fit.values)
                      or (d is Dtype.BF16 and any(not v.key.startswith("gemm_") for v in fit.values)))
    print(f"GPU {gpu.name} ({how}): efficiency = FLOPs / ((time - {gpu.kernel_launch_s * 1e6:g} us launch gap) x dense "
          f"peak ({peaks} TFLOP/s)), the median per power-of-two bin of FLOPs:")
    for v in fit.values:
        points = [f"2^{round(math.log2(x))} {e:.3f}" for x, e in v.value]  # type: ignore[union-attr,misc]
        count = sum(1 for r in fit.check if r["curve"] == v.key)
        print(f"  {v.key} ({len(points)} point{'s' if len(points) > 1 else ''} from {count} "
              f"kernel{'s' if count > 1 else ''}):")
        for i in range(0, len(points), POINTS_PER_LINE):
            print("    " + "  ".join(points[i:i + POINTS_PER_LINE]))
    for why in fit.dropped:
        print(f"  not used: {why}")
    print(f"each measured kernel priced on {gpu.name} as llmsim prices it (sim/costs/compute.py), its error against "
          "the table (kernels of one shape as one, at their median time):")
    print(f"  {'curve':<22} {'kernels':>7}  {'catalogue: median':>17} {'worst':>7}  {'calibrated: median':>18} "
          f"{'worst':>7}")
    for v in fit.values:
        rows = [r for r in fit.check if r["curve"] == v.key]
        before = [abs(r["error_before"]) for r in rows]
        after = [abs(r["error_after"]) for r in rows]
        print(f"  {v.key:<22} {len(rows):>7}  {statistics.median(before):>17.1%} {max(before):>7.1%}  "
              f"{statistics.median(after):>18.1%} {max(after):>7.1%}")
    for v in fit.values:
        rows = [r for r in fit.check if r["curve"] == v.key]
        worst = max(rows, key=lambda r: (abs(r["error_after"]), r["flops"]))
        print(f"  worst {v.key}: {worst['kernel']}: measured {worst['measured_us']:g} us, calibrated "
              f"{worst['calibrated_us']:g} us ({_pct(worst['error_after'])})")

"""The GEMMs of a PyTorch profiler trace, read as measured kernels.

``torch.profiler.profile(activities=[CPU, CUDA], record_shapes=True)`` followed by
``prof.export_chrome_trace(PATH)`` (or ``tensorboard_trace_handler``) writes a Chrome trace
(JSON, optionally gzipped): ``{"traceEvents": [...]}`` whose complete events (``"ph": "X"``,
``ts`` and ``dur`` in microseconds) include

* the operators, ``"cat": "cpu_op"``: ``"name": "aten::mm"``, ``"args": {"External id": N,
  "Input Dims": [[m, k], [k, n]], "Input type": ["c10::BFloat16", ...], ...}`` (the shapes
  are there with ``record_shapes=True``);
* the GPU kernels, ``"cat": "kernel"``: ``"args": {"External id": N, "correlation": C, ...}``,
  whose ``External id`` is that of the operator that launched it (libkineto's
  ``ChromeTraceLogger::handleActivity`` writes the linked CPU activity's correlation id,
  ``libkineto/src/output_json.cpp``); where a kernel lacks it, the CUDA runtime call with the
  kernel's ``correlation`` (``"cat": "cuda_runtime"``) gives it.

Each operator among :data:`GEMM_OPS` whose kernels the trace links is one measured GEMM: its
shape from ``Input Dims``, its format from ``Input type``, its time the sum of its kernels'
``dur`` (a split-K GEMM launches two). The launching operator is the innermost one
(``aten::linear`` calls ``aten::addmm``, whose id the kernels carry), so no GEMM is counted
twice. Operators in a format with no tensor-core curve (``float``), and operators whose shapes
do not make a GEMM, are counted and listed as not used. Attention operators are not read.
"""

from __future__ import annotations

import gzip
import io
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

from sim.calibrate.kernel_table import MAX_DIMENSION, KernelTable, MeasuredGemm
from sim.errors import ConfigError, Described
from sim.inputs import read_input_bytes
from sim.types import Dtype

__all__ = ["GEMM_OPS", "MAX_TRACE_BYTES", "TORCH_DTYPES", "gemm_shape", "is_trace", "parse_profiler_trace",
           "read_profiler_trace"]

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm", "aten::matmul",
            "aten::linear")
"""The operators read as GEMMs."""
TORCH_DTYPES = {"c10::BFloat16": Dtype.BF16, "c10::Half": Dtype.FP16, "c10::Float8_e4m3fn": Dtype.FP8,
                "c10::Float8_e5m2": Dtype.FP8, "c10::Float8_e4m3fnuz": Dtype.FP8, "c10::Float8_e5m2fnuz": Dtype.FP8}
"""``Input type`` words (the C++ scalar type names the profiler records) and the format each is."""
MAX_TRACE_BYTES = 256 * 2**20
"""The largest trace read (256 MiB of JSON, after gunzip: a profiled step or two of a large
model; ``torch.profiler.schedule(wait=1, warmup=1, active=1)`` records one)."""


def is_trace(data: bytes) -> bool:
    """Whether a file's bytes are a JSON or gzipped trace rather than a CSV table."""
    return data[:2] == b"\x1f\x8b" or data.lstrip()[:1] in (b"{", b"[")


def read_profiler_trace(path: str) -> KernelTable:
    """The GEMMs of the profiler trace in ``path`` (:func:`parse_profiler_trace`)."""
    return parse_profiler_trace(read_input_bytes(path, "PyTorch profiler trace", MAX_TRACE_BYTES), path)


def parse_profiler_trace(data: bytes, path: str = "<trace>") -> KernelTable:
    """Read a profiler trace's linked GEMMs (the module docstring).

    Raises
    ------
    ConfigError
        Naming ``path`` when it is not JSON (or gzip of it), has no ``traceEvents`` list, or
        has no GEMM operator with input shapes whose kernels it links.
    """
    if data[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
                data = f.read(MAX_TRACE_BYTES + 1)
        except (OSError, EOFError) as exc:
            raise ConfigError(path, "<file>", "a gzipped PyTorch profiler trace", str(exc)) from None
        if len(data) > MAX_TRACE_BYTES:
            raise ConfigError(path, "<file>", f"a trace of at most {MAX_TRACE_BYTES // 2**20} MiB once unzipped "
                              "(profile fewer steps: torch.profiler.schedule(active=1))", Described("more"))
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(path, "<file>", "a PyTorch profiler trace (Chrome trace JSON, torch.profiler's "
                          "export_chrome_trace)", Described(f"not JSON: {exc}")) from None
    except RecursionError:
        raise ConfigError(path, "<file>", "a PyTorch profiler trace (Chrome trace JSON, a list of flat events)",
                          Described("JSON nested too deep to read")) from None
    events = raw.get("traceEvents") if isinstance(raw, Mapping) else raw
    if not isinstance(events, list):
        raise ConfigError(path, "traceEvents", "a list of trace events (torch.profiler's export_chrome_trace)",
                          sorted(raw) if isinstance(raw, Mapping) else raw)
    ops: list[Mapping] = []
    kernel_us: dict[int, float] = defaultdict(float)
    unlinked: list[Mapping] = []
    runtime: dict[int, int] = {}
    for ev in events:
        if not isinstance(ev, Mapping) or ev.get("ph") != "X" or not isinstance(ev.get("args"), Mapping):
            continue
        cat, args = ev.get("cat"), ev["args"]
        if cat == "cpu_op" and ev.get("name") in GEMM_OPS:
            ops.append(ev)
        elif cat == "kernel":
            eid = args.get("External id")
            if _number(ev.get("dur")) is None:
                continue
            if isinstance(eid, int) and eid:
                kernel_us[eid] += float(ev["dur"])
            else:
                unlinked.append(ev)
        elif cat in ("cuda_runtime", "cuda_driver"):
            eid, corr = args.get("External id"), args.get("correlation")
            if isinstance(eid, int) and isinstance(corr, int):
                runtime[corr] = eid
    for ev in unlinked:
        corr = ev["args"].get("correlation")
        eid = runtime.get(corr) if isinstance(corr, int) else None
        if eid is not None:
            kernel_us[eid] += float(ev["dur"])
    gemms: list[MeasuredGemm] = []
    skipped: dict[str, int] = defaultdict(int)
    for ev in ops:
        args = ev["args"]
        eid = args.get("External id")
        if not isinstance(eid, int) or eid not in kernel_us:
            continue  # an operator that launched no kernel itself (aten::linear around aten::addmm)
        shape = gemm_shape(ev["name"], args.get("Input Dims"))
        if shape is None:
            skipped[f"{ev['name']}: input shapes that make no GEMM (or none recorded)"] += 1
            continue
        types = args.get("Input type")
        first = types[_first_matrix(ev["name"])] if isinstance(types, list) and len(types) > 1 else None
        dtype = TORCH_DTYPES.get(first) if isinstance(first, str) else None
        if dtype is None:
            skipped[f"{ev['name']}: inputs of type {first!s:.40} (no tensor-core curve)"] += 1
            continue
        time_us = kernel_us[eid]
        if not time_us > 0:
            skipped[f"{ev['name']}: kernels of zero duration"] += 1
            continue
        m, n, k, batch = shape
        ts = _number(ev.get("ts"))
        gemms.append(MeasuredGemm(m, n, k, batch, dtype, time_us * 1e-6,
                                  f"{ev['name']} External id {eid}" + (f" at ts {ts:.3f}" if ts is not None else "")))
    if not gemms:
        raise ConfigError(path, "traceEvents", "GEMM operators (" + ", ".join(GEMM_OPS[:4]) + ", ...) recorded with "
                          "their input shapes (torch.profiler.profile(record_shapes=True)) and the GPU kernels they "
                          "launched (ProfilerActivity.CUDA), linked by External id",
                          Described(f"{len(ops)} GEMM operators, {len(kernel_us)} operators with linked kernels, "
                                    f"none both" + (f" ({'; '.join(f'{n} x {w}' for w, n in skipped.items())})"
                                                    if skipped else "")))
    meta = _meta(raw)
    notes = tuple(f"{n} x {why}" for why, n in sorted(skipped.items()))
    return KernelTable(path, "trace", tuple(gemms), (), meta, notes)


def _first_matrix(name: str) -> int:
    """The index of an operator's first matrix among its inputs (after ``addmm``'s bias)."""
    return 1 if name in ("aten::addmm", "aten::baddbmm") else 0


def gemm_shape(name: str, dims: object) -> tuple[int, int, int, int] | None:
    """``(m, n, k, batch)`` of operator ``name`` from its ``Input Dims``; None where they do not
    make a GEMM (inner sizes differ, a dimension is missing or not positive)."""
    if not isinstance(dims, Sequence) or not all(isinstance(d, Sequence) for d in dims):
        return None
    if not all(isinstance(x, int) and not isinstance(x, bool) and 0 < x <= MAX_DIMENSION for d in dims for x in d):
        return None
    i = _first_matrix(name)
    if len(dims) < i + 2:
        return None
    a, b = list(dims[i]), list(dims[i + 1])
    if name in ("aten::mm", "aten::addmm", "aten::_scaled_mm") and len(a) == 2 and len(b) == 2 and a[1] == b[0]:
        return a[0], b[1], a[1], 1
    if name in ("aten::bmm", "aten::baddbmm") and len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
        return a[1], b[2], a[2], a[0]
    if name == "aten::linear" and len(a) >= 2 and len(b) == 2 and a[-1] == b[1]:
        return math.prod(a[:-1]), b[0], a[-1], 1
    if name == "aten::matmul" and len(a) >= 2 and len(b) == 2 and a[-1] == b[0]:
        return math.prod(a[:-1]), b[1], a[-1], 1
    if name == "aten::matmul" and len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
        return a[1], b[2], a[2], a[0]
    return None


def _meta(raw: object) -> tuple[tuple[str, str], ...]:
    """What the trace says of its GPU: ``deviceProperties[0].name`` (libkineto writes it)."""
    props = raw.get("deviceProperties") if isinstance(raw, Mapping) else None
    if isinstance(props, list) and props and isinstance(props[0], Mapping) and isinstance(props[0].get("name"), str):
        return (("device", props[0]["name"][:80]),)
    return ()


def _number(x: object) -> float | None:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0
    return float(x) if ok else None  # type: ignore[arg-type]


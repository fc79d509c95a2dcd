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
do not make a GEMM, are counted and listed as not used.

Each attention operator among :data:`ATTENTION_OPS` whose kernels the trace links is one
measured fused attention kernel, forward or backward: PyTorch's scaled-dot-product attention
as its FlashAttention-2 backend (``aten::_flash_attention_forward`` / ``_backward``, the inner
operators ``aten::_scaled_dot_product_flash_attention`` calls, which launch the kernels; the
outer ones are read too, where a trace links kernels to them) and its cuDNN backend
(``aten::_scaled_dot_product_cudnn_attention`` / ``_backward``), priced on the GPU's
``flash2_attention_efficiency`` and ``attention_efficiency`` curves. The argument positions
are those of the operators' schemas (pytorch/pytorch ``aten/src/ATen/native/native_functions.yaml``,
PyTorch 2.5-2.9): ``_flash_attention_forward(query, key, value, cum_seq_q, cum_seq_k, max_q,
max_k, dropout_p, is_causal, ...)`` with ``query`` laid out ``(batch, seq, heads, head_dim)``,
its backward ``(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q,
max_k, dropout_p, is_causal, ...)``; ``_scaled_dot_product_flash_attention(query, key, value,
dropout_p, is_causal, ...)``, ``_scaled_dot_product_cudnn_attention(query, key, value,
attn_bias, compute_log_sumexp, dropout_p, is_causal, ...)`` and their backwards
(``is_causal`` at 11 and 14) with ``query`` laid out ``(batch, heads, seq, head_dim)``. The
shape comes from ``Input Dims`` (the key's heads are the key/value heads), the format from
``Input type``, ``is_causal`` from ``Concrete Inputs`` (which the profiler records for scalar
arguments with ``record_shapes=True``), the time is the sum of the operator's kernels (a
FlashAttention-2 backward launches three). Not used, and listed: a packed (variable-length)
call, whose 3-dimensional inputs hold no batch; query and key lengths that differ; an
``is_causal`` not recorded; a format other than BF16 or FP16; PyTorch's memory-efficient
backend (``aten::_efficient_attention_forward``), which llmsim has no curve for. An outer
operator is not counted where an attention operator inside it (on its thread, within its
span) already is.
"""

from __future__ import annotations

import gzip
import io
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sim.calibrate.kernel_table import ATTENTION_DTYPES, MAX_DIMENSION, KernelTable, MeasuredAttention, MeasuredGemm
from sim.errors import ConfigError, Described
from sim.inputs import read_input_bytes
from sim.types import AttentionKernel, Dtype

__all__ = ["ATTENTION_OPS", "GEMM_OPS", "MAX_TRACE_BYTES", "NOT_READ_ATTENTION_OPS", "TORCH_DTYPES",
           "AttentionSignature", "attention_shape", "gemm_shape", "is_trace", "parse_profiler_trace",
           "read_profiler_trace"]

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm", "aten::matmul",
            "aten::linear")
"""The operators read as GEMMs."""


@dataclass(frozen=True)
class AttentionSignature:
    """Where an attention operator's arguments are: the positions of ``query``, ``key`` and
    ``is_causal`` among its inputs, the layout of ``query`` (``bshd``: batch, sequence, heads,
    head dim; ``bhsd``: batch, heads, sequence, head dim), the direction and the kernel."""

    query: int
    key: int
    causal: int
    layout: str
    backward: bool
    kernel: AttentionKernel


ATTENTION_OPS = {
    "aten::_flash_attention_forward": AttentionSignature(0, 1, 8, "bshd", False, AttentionKernel.FLASH2),
    "aten::_flash_attention_backward": AttentionSignature(1, 2, 11, "bshd", True, AttentionKernel.FLASH2),
    "aten::_scaled_dot_product_flash_attention": AttentionSignature(0, 1, 4, "bhsd", False, AttentionKernel.FLASH2),
    "aten::_scaled_dot_product_flash_attention_backward": AttentionSignature(1, 2, 11, "bhsd", True,
                                                                             AttentionKernel.FLASH2),
    "aten::_scaled_dot_product_cudnn_attention": AttentionSignature(0, 1, 6, "bhsd", False, AttentionKernel.VENDOR),
    "aten::_scaled_dot_product_cudnn_attention_backward": AttentionSignature(1, 2, 14, "bhsd", True,
                                                                             AttentionKernel.VENDOR),
}
"""The operators read as fused attention kernels, and where their arguments are (the schemas
of pytorch/pytorch ``native_functions.yaml``, the module docstring)."""
NOT_READ_ATTENTION_OPS = ("aten::_efficient_attention_forward", "aten::_efficient_attention_backward")
"""Attention operators listed as not used: PyTorch's memory-efficient backend has no curve."""
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
    attention_ops: list[Mapping] = []
    kernel_us: dict[int, float] = defaultdict(float)
    unlinked: list[Mapping] = []
    runtime: dict[int, int] = {}
    for ev in events:
        if not isinstance(ev, Mapping) or ev.get("ph") != "X" or not isinstance(ev.get("args"), Mapping):
            continue
        cat, args = ev.get("cat"), ev["args"]
        if cat == "cpu_op" and ev.get("name") in GEMM_OPS:
            ops.append(ev)
        elif cat == "cpu_op" and (ev.get("name") in ATTENTION_OPS or ev.get("name") in NOT_READ_ATTENTION_OPS):
            attention_ops.append(ev)
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
    attention = _attention(attention_ops, kernel_us, skipped)
    if not gemms and not attention:
        raise ConfigError(path, "traceEvents", "GEMM operators (" + ", ".join(GEMM_OPS[:4]) + ", ...) or attention "
                          "operators (aten::_flash_attention_forward, aten::_scaled_dot_product_cudnn_attention, "
                          "...) recorded with their input shapes (torch.profiler.profile(record_shapes=True)) and the "
                          "GPU kernels they launched (ProfilerActivity.CUDA), linked by External id",
                          Described(f"{len(ops)} GEMM and {len(attention_ops)} attention operators, "
                                    f"{len(kernel_us)} operators with linked kernels, none both"
                                    + (f" ({'; '.join(f'{n} x {w}' for w, n in skipped.items())})"
                                       if skipped else "")))
    meta = _meta(raw)
    notes = tuple(f"{n} x {why}" for why, n in sorted(skipped.items()))
    return KernelTable(path, "trace", tuple(gemms), tuple(attention), meta, notes)


def _attention(ops: list[Mapping], kernel_us: Mapping[int, float], skipped: dict[str, int]) -> list[MeasuredAttention]:
    """The attention operators among ``ops`` that launched kernels, each one measured kernel
    (the module docstring); what is not used is counted into ``skipped``."""
    linked = [ev for ev in ops if isinstance(ev["args"].get("External id"), int)
              and ev["args"]["External id"] in kernel_us]
    outer = _outer(linked)
    out: list[MeasuredAttention] = []
    for i, ev in enumerate(linked):
        name, args = ev["name"], ev["args"]
        sig = ATTENTION_OPS.get(name)
        if sig is None:
            skipped[f"{name}: PyTorch's memory-efficient attention (no curve for it)"] += 1
            continue
        if i in outer:
            skipped[f"{name}: an attention operator inside it is counted"] += 1
            continue
        shape = attention_shape(sig, args.get("Input Dims"))
        if isinstance(shape, str):
            skipped[f"{name}: {shape}"] += 1
            continue
        concrete = args.get("Concrete Inputs")
        flag = concrete[sig.causal] if isinstance(concrete, list) and len(concrete) > sig.causal else None
        if flag not in ("True", "False"):
            skipped[f"{name}: is_causal not recorded (Concrete Inputs, PyTorch 2.1+ with record_shapes=True)"] += 1
            continue
        types = args.get("Input type")
        word = types[sig.query] if isinstance(types, list) and len(types) > sig.query else None
        dtype = TORCH_DTYPES.get(word) if isinstance(word, str) else None
        if dtype not in ATTENTION_DTYPES:
            skipped[f"{name}: inputs of type {word!s:.40} (the attention curves are BF16 and FP16)"] += 1
            continue
        time_s = kernel_us[args["External id"]] * 1e-6
        if not time_s > 0:
            skipped[f"{name}: kernels of zero duration"] += 1
            continue
        batch, heads, kv_heads, seq, head_dim = shape
        ts = _number(ev.get("ts"))
        where = f"{name} External id {args['External id']}" + (f" at ts {ts:.3f}" if ts is not None else "")
        out.append(MeasuredAttention(batch, heads, kv_heads, seq, head_dim, flag == "True", sig.kernel, dtype,
                                     None if sig.backward else time_s, time_s if sig.backward else None, where))
    return out


def _outer(ops: list[Mapping]) -> set[int]:
    """The indices of ``ops`` whose span, on their thread, holds another of ``ops`` (a
    kernel-launching attention operator called inside another)."""
    spans = []
    for i, ev in enumerate(ops):
        ts, dur = _number(ev.get("ts")), _number(ev.get("dur"))
        if ts is not None and dur is not None:
            spans.append((ev.get("pid"), ev.get("tid"), ts, -dur, i))
    spans.sort(key=lambda s: (str(s[0]), str(s[1]), s[2], s[3], s[4]))
    outer: set[int] = set()
    open_: list[tuple[float, int]] = []  # (end, index) of the spans around the current one
    thread = None
    for pid, tid, ts, neg, i in spans:
        if (pid, tid) != thread:
            thread, open_ = (pid, tid), []
        while open_ and open_[-1][0] <= ts:
            open_.pop()
        if open_:
            outer.add(open_[-1][1])
        open_.append((ts - neg, i))
    return outer


def attention_shape(sig: AttentionSignature, dims: object) -> tuple[int, int, int, int, int] | str:
    """``(batch, heads, kv_heads, seq, head_dim)`` of an attention operator from its ``Input
    Dims``, or why they make none of llmsim's attention kernels."""
    if not isinstance(dims, list) or len(dims) <= max(sig.query, sig.key) \
            or not all(isinstance(dims[i], list) for i in (sig.query, sig.key)):
        return "no input shapes recorded"
    q, k = list(dims[sig.query]), list(dims[sig.key])
    if len(q) == 3 or len(k) == 3:
        return "packed (variable-length) sequences: no batch to price"
    if len(q) != 4 or len(k) != 4 or not all(isinstance(x, int) and not isinstance(x, bool)
                                             and 0 < x <= MAX_DIMENSION for x in q + k):
        return "input shapes that make no attention kernel"
    if sig.layout == "bshd":
        (b, s, h, d), (kb, ks, kh, kd) = q, k
    else:
        (b, h, s, d), (kb, kh, ks, kd) = q, k
    if kb != b or kd != d or h % kh:
        return "input shapes that make no attention kernel"
    if ks != s:
        return "query and key lengths that differ"
    return b, h, kh, s, d


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


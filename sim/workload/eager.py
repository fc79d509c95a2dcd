"""The elementwise kernels of a Llama layer run in PyTorch eager mode (no ``torch.compile``).

torchtitan's Llama (pytorch/torchtitan ``torchtitan/models/llama/model.py`` and
``torchtitan/models/norms.py``, the code of its end-2024 benchmarks, torchtitan 9dec370) writes
its norms, rotary embedding, grouped-query K/V expansion and SwiGLU as plain tensor code::

    RMSNorm:  output = self._norm(x.float()).type_as(x); return output * self.weight
              _norm(x) = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
    RoPE:     xq_ = torch.view_as_complex(xq.float().reshape(..., -1, 2))
              xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3); xq_out.type_as(xq)
    repeat_kv: torch.unsqueeze(x, 3).expand(bs, slen, n_kv_heads, n_rep, d).reshape(...)
    SwiGLU:   self.w2(F.silu(self.w1(x)) * self.w3(x))

Eagerly, every ATen op above is one CUDA kernel that reads its inputs from HBM and writes its
output back; ``torch.compile`` (torchtitan ``--training.compile``, off by default) fuses each
group into one or two Triton kernels, which the fused pricing of :mod:`sim.workload.layers`
stands for (one norm kernel reading and writing the activation, one activation kernel). The
backward is autograd's formula for each op (pytorch/pytorch ``tools/autograd/derivatives.yaml``:
``mul``, ``_to_copy``, ``pow`` -- ``grad * (2 * self.pow(1))``, whose ``pow(self, 1)`` copies
(``pow_Tensor_Scalar_out``) --, ``mean`` -- ``grad.expand(...) / n`` --, ``rsqrt``,
``silu_backward``, the ``sum`` of an ``expand``), plus the addition autograd makes where a
tensor feeds two ops (``x`` in RMSNorm feeds ``pow`` and ``mul``).

Each function returns ``(name, bytes, access)`` per kernel, for ``tokens`` rows of the given
widths; the bytes are each op's reads and writes at its dtypes (activations bf16, the norm's and
the rotary embedding's upcasts fp32; per-row statistics, ``tokens x 4`` bytes, are counted as
such), the access pattern the one PyTorch's kernel for it walks (:class:`MemoryAccess`: the
upcasts run ``unrolled_elementwise_kernel``, the broadcasts and ``repeat_kv``'s copy the strided
``elementwise_kernel``, as profiled in a torchtitan layer on our H100,
``benchmarks/device/results/h100-sxm5-80gb-2026-11-26-eager-layer.json``).

Under ``torch.compile`` the norms and SwiGLU fuse, but the rotary embedding does not:
TorchInductor generates no code for complex tensors (``torch/_inductor/lowering.py``,
``unsupported_input_tensor``), so the complex multiply stays ATen's kernel, the casts on either
side of it stay kernels of their own, and ``repeat_kv``'s K and V are written out for SDPA
(:func:`compiled_rope_forward`, :func:`compiled_rope_backward`; the same profile's compiled
case).
"""

from __future__ import annotations

from sim.types import MemoryAccess

__all__ = ["Kernel", "rmsnorm_forward", "rmsnorm_backward", "rope_forward", "rope_backward",
           "repeat_kv_forward", "repeat_kv_backward", "compiled_rope_forward", "compiled_rope_backward",
           "swiglu_forward", "swiglu_backward"]

Kernel = tuple[str, float, MemoryAccess]
"""A kernel's name, the HBM bytes it moves and how it walks them."""

_BF16, _FP32 = 2, 4
_S, _UP, _BL, _BR = MemoryAccess.STREAM, MemoryAccess.UPCAST, MemoryAccess.BROADCAST_LAST, MemoryAccess.BROADCAST_ROW

# RMSNorm on a [tokens, width] bf16 input: per element (rows: per token) bytes of each op
_RMSNORM_FWD = (
    ("float", _BF16 + _FP32, 0, _UP),      # x.float()
    ("pow", 2 * _FP32, 0, _S),            # x.pow(2)
    ("mean", _FP32, _FP32, _S),           # .mean(-1, keepdim=True)
    ("add-eps", 0, 2 * _FP32, _S),        # + eps (one value per row)
    ("rsqrt", 0, 2 * _FP32, _S),          # torch.rsqrt
    ("mul-rstd", 2 * _FP32, _FP32, _BR),  # x * rsqrt(...)
    ("type-as", _FP32 + _BF16, 0, _S),    # .type_as(x)
    ("mul-weight", 2 * _BF16, 0, _BL),    # output * self.weight
)
_RMSNORM_BWD = (
    ("mul-weight-dgrad", 2 * _BF16, 0, _BL),       # grad * weight
    ("mul-weight-wgrad", 3 * _BF16, 0, _S),        # grad * output ...
    ("sum-weight-wgrad", _BF16, 0, _S),            # ... summed over the tokens
    ("type-as-bwd", _BF16 + _FP32, 0, _UP),        # grad.to(float32)
    ("mul-rstd-dgrad", 2 * _FP32, _FP32, _BR),     # grad * rstd
    ("mul-rstd-rgrad", 3 * _FP32, 0, _S),          # grad * x ...
    ("sum-rstd-rgrad", _FP32, _FP32, _S),          # ... summed over the row
    ("rsqrt-bwd-pow", 0, 2 * _FP32, _S),           # -0.5 * grad * result.pow(3)
    ("rsqrt-bwd-mul", 0, 3 * _FP32, _S),
    ("rsqrt-bwd-scale", 0, 2 * _FP32, _S),
    ("mean-bwd", _FP32, _FP32, _BR),               # grad.expand(...) / n
    ("pow-bwd-copy", 2 * _FP32, 0, _S),            # self.pow(1)
    ("pow-bwd-scale", 2 * _FP32, 0, _S),           # 2 * ...
    ("pow-bwd-mul", 3 * _FP32, 0, _S),             # grad * ...
    ("accumulate", 3 * _FP32, 0, _S),              # x feeds pow and mul: the two grads added
    ("float-bwd", _FP32 + _BF16, 0, _S),           # grad.to(bfloat16)
)
# the rotary embedding of one [tokens, width] projection (q or k), bf16 in and out
_ROPE_FWD = (
    ("float", _BF16 + _FP32, _UP),       # xq.float()
    ("complex-mul", 2 * _FP32, _S),      # view_as_complex(...) * freqs_cis (complex64)
    ("type-as", _FP32 + _BF16, _S),      # .type_as(xq)
)
_ROPE_BWD = (
    ("type-as-bwd", _BF16 + _FP32, _UP), # grad.to(float32)
    ("complex-mul-bwd", 2 * _FP32, _S),  # grad * freqs_cis.conj()
    ("float-bwd", _FP32 + _BF16, _S),    # grad.to(bfloat16)
)
# SwiGLU on the [tokens, ffn] outputs of w1 and w3 (bf16)
_SWIGLU_FWD = (("silu", 2 * _BF16), ("mul", 3 * _BF16))
_SWIGLU_BWD = (("mul-bwd-gate", 3 * _BF16), ("mul-bwd-up", 3 * _BF16), ("silu-bwd", 3 * _BF16))
# (SwiGLU's kernels are vectorized: contiguous bf16 in and out)


def _rmsnorm(table, prefix: str, tokens: int, width: int) -> list[Kernel]:
    return [(f"{prefix}-{name}", float(tokens * (width * per_elem + per_row)), access)
            for name, per_elem, per_row, access in table]


def rmsnorm_forward(prefix: str, tokens: int, width: int) -> list[Kernel]:
    """The eight kernels of torchtitan's ``RMSNorm.forward`` on ``tokens x width``.

    >>> [n for n, _, _ in rmsnorm_forward("norm1", 1, 8)][:3]
    ['norm1-float', 'norm1-pow', 'norm1-mean']
    >>> sum(b for _, b, _ in rmsnorm_forward("n", 1, 1000)) // 1000  # 36 bytes an element
    36.0
    """
    return _rmsnorm(_RMSNORM_FWD, prefix, tokens, width)


def rmsnorm_backward(prefix: str, tokens: int, width: int) -> list[Kernel]:
    """Autograd's sixteen kernels for that norm's backward (92 bytes an element)."""
    return _rmsnorm(_RMSNORM_BWD, prefix, tokens, width)


def _per_width(table, prefix: str, tokens: int, widths: tuple[tuple[str, int], ...]) -> list[Kernel]:
    return [(f"{prefix}-{tag}-{name}", float(tokens * w * per_elem), access) for tag, w in widths if w
            for name, per_elem, access in table]


def rope_forward(tokens: int, q_width: int, kv_width: int) -> list[Kernel]:
    """``apply_rotary_emb`` on the query and key projections: three kernels each."""
    return _per_width(_ROPE_FWD, "rope", tokens, (("q", q_width), ("k", kv_width)))


def rope_backward(tokens: int, q_width: int, kv_width: int) -> list[Kernel]:
    """The rotary embedding's backward: three kernels each for the query and key gradients."""
    return _per_width(_ROPE_BWD, "rope-bwd", tokens, (("q", q_width), ("k", kv_width)))


def repeat_kv_forward(tokens: int, q_width: int, kv_width: int) -> list[Kernel]:
    """``repeat_kv`` of K and V from ``kv_width`` to ``q_width`` columns: the ``reshape`` of
    the expanded view copies (one kernel each, reading the K/V heads and writing them
    repeated); none when every query head has its own K/V head.

    >>> repeat_kv_forward(1, 8, 8), [b for _, b, _ in repeat_kv_forward(1, 8, 2)]
    ([], [20.0, 20.0])
    """
    if q_width == kv_width:
        return []
    per_token = float(tokens * (kv_width + q_width) * _BF16)
    return [("repeat-kv-k", per_token, MemoryAccess.STRIDED), ("repeat-kv-v", per_token, MemoryAccess.STRIDED)]


def repeat_kv_backward(tokens: int, q_width: int, kv_width: int) -> list[Kernel]:
    """The backward of ``expand``: the K and V gradients summed over the repeated heads (a
    reduction over a middle dimension: priced as streaming, 2.0 TB/s measured in the layer)."""
    return [(f"{name}-bwd", b, _S) for name, b, _ in repeat_kv_forward(tokens, q_width, kv_width)]


def _streamed(ks: list[Kernel]) -> list[Kernel]:
    """The same kernels as Triton writes them under ``torch.compile``: contiguous, streaming."""
    return [(name, nbytes, _S) for name, nbytes, _ in ks]


def compiled_rope_forward(tokens: int, q_width: int, kv_width: int, rotary: bool = True) -> list[Kernel]:
    """torchtitan's ``apply_rotary_emb`` and ``repeat_kv`` as ``torch.compile`` runs them: for
    the query and the key, a Triton kernel casting it to fp32 (``xq.float()``, read into
    complex64), ATen's complex multiply by ``freqs_cis`` (read and written in fp32), and a
    Triton kernel casting the product back to bf16, which for the key also writes it repeated
    to every query head; then a Triton kernel writing V repeated. Without a rotary embedding
    (``rotary`` false) K and V are only repeated. In the profiled layer (Llama 3.1 8B, 16,384
    tokens, H100) these ran 132, 193, 135 us (query), 39, 50, 66 us (key) and 59 us (V), each
    at 2.8-3.0 TB/s.

    >>> [(n, b) for n, b, _ in compiled_rope_forward(1, 8, 2)]  # doctest: +NORMALIZE_WHITESPACE
    [('rope-q-float', 48.0), ('rope-q-complex-mul', 64.0), ('rope-q-type-as', 48.0),
     ('rope-k-float', 12.0), ('rope-k-complex-mul', 16.0), ('rope-k-type-as-repeat', 24.0),
     ('repeat-kv-v', 20.0)]
    """
    repeats = _streamed(repeat_kv_forward(tokens, q_width, kv_width))
    if not rotary:
        return repeats
    out: list[Kernel] = []
    for tag, w in (("q", q_width), ("k", kv_width)):
        out += [(f"rope-{tag}-float", float(tokens * w * (_BF16 + _FP32)), _S),
                (f"rope-{tag}-complex-mul", float(tokens * w * 2 * _FP32), _S)]
        back = float(tokens * (w * _FP32 + (q_width if tag == "k" else w) * _BF16))
        out.append((f"rope-{tag}-type-as" + ("-repeat" if tag == "k" and q_width != kv_width else ""), back, _S))
    return out + [k for k in repeats if k[0] == "repeat-kv-v"]


def compiled_rope_backward(tokens: int, q_width: int, kv_width: int, rotary: bool = True) -> list[Kernel]:
    """The backward of :func:`compiled_rope_forward`, as profiled: V's gradient summed over the
    repeated heads, the key's summed and cast to fp32 in one Triton kernel, ATen's complex
    multiply by the conjugate, the cast back to bf16; the query's three kernels the same
    without the sum (57; 68, 51, 34; 136, 195, 132 us in the profiled layer).

    >>> [(n, b) for n, b, _ in compiled_rope_backward(1, 8, 2)]  # doctest: +NORMALIZE_WHITESPACE
    [('repeat-kv-v-bwd', 20.0), ('rope-bwd-k-sum-float', 24.0), ('rope-bwd-k-complex-mul', 16.0),
     ('rope-bwd-k-type-as', 12.0), ('rope-bwd-q-float', 48.0), ('rope-bwd-q-complex-mul', 64.0),
     ('rope-bwd-q-type-as', 48.0)]
    """
    repeats = _streamed(repeat_kv_backward(tokens, q_width, kv_width))
    if not rotary:
        return repeats
    out = [k for k in repeats if k[0] == "repeat-kv-v-bwd"]
    for tag, w in (("k", kv_width), ("q", q_width)):
        first = float(tokens * ((q_width if tag == "k" else w) * _BF16 + w * _FP32))
        out += [(f"rope-bwd-{tag}-" + ("sum-float" if tag == "k" and q_width != kv_width else "float"), first, _S),
                (f"rope-bwd-{tag}-complex-mul", float(tokens * w * 2 * _FP32), _S),
                (f"rope-bwd-{tag}-type-as", float(tokens * w * (_FP32 + _BF16)), _S)]
    return out


def swiglu_forward(tokens: int, ffn_width: int) -> list[Kernel]:
    """``F.silu(w1(x)) * w3(x)``: a SiLU kernel and a multiply."""
    return [(f"swiglu-{n}", float(tokens * ffn_width * b), _S) for n, b in _SWIGLU_FWD]


def swiglu_backward(tokens: int, ffn_width: int) -> list[Kernel]:
    """Its backward: the multiply's two input gradients, then ``silu_backward``."""
    return [(f"swiglu-{n}", float(tokens * ffn_width * b), _S) for n, b in _SWIGLU_BWD]

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

Each function returns ``(name, bytes)`` per kernel, for ``tokens`` rows of the given widths;
the bytes are each op's reads and writes at its dtypes (activations bf16, the norm's and the
rotary embedding's upcasts fp32; per-row statistics, ``tokens x 4`` bytes, are counted as
such). The rotary embedding's compiled kernel is not priced on the fused side (it is not
modelled for any framework), so the eager rotary kernels are its whole cost here.
"""

from __future__ import annotations

__all__ = ["Kernel", "rmsnorm_forward", "rmsnorm_backward", "rope_forward", "rope_backward",
           "repeat_kv_forward", "repeat_kv_backward", "swiglu_forward", "swiglu_backward"]

Kernel = tuple[str, float]
"""A kernel's name and the HBM bytes it moves."""

_BF16, _FP32 = 2, 4

# RMSNorm on a [tokens, width] bf16 input: per element (rows: per token) bytes of each op
_RMSNORM_FWD = (
    ("float", _BF16 + _FP32, 0),          # x.float()
    ("pow", 2 * _FP32, 0),                # x.pow(2)
    ("mean", _FP32, _FP32),               # .mean(-1, keepdim=True)
    ("add-eps", 0, 2 * _FP32),            # + eps (one value per row)
    ("rsqrt", 0, 2 * _FP32),              # torch.rsqrt
    ("mul-rstd", 2 * _FP32, _FP32),       # x * rsqrt(...)
    ("type-as", _FP32 + _BF16, 0),        # .type_as(x)
    ("mul-weight", 2 * _BF16, 0),         # output * self.weight
)
_RMSNORM_BWD = (
    ("mul-weight-dgrad", 2 * _BF16, 0),           # grad * weight
    ("mul-weight-wgrad", 3 * _BF16, 0),           # grad * output ...
    ("sum-weight-wgrad", _BF16, 0),               # ... summed over the tokens
    ("type-as-bwd", _BF16 + _FP32, 0),            # grad.to(float32)
    ("mul-rstd-dgrad", 2 * _FP32, _FP32),         # grad * rstd
    ("mul-rstd-rgrad", 3 * _FP32, 0),             # grad * x ...
    ("sum-rstd-rgrad", _FP32, _FP32),             # ... summed over the row
    ("rsqrt-bwd-pow", 0, 2 * _FP32),              # -0.5 * grad * result.pow(3)
    ("rsqrt-bwd-mul", 0, 3 * _FP32),
    ("rsqrt-bwd-scale", 0, 2 * _FP32),
    ("mean-bwd", _FP32, _FP32),                   # grad.expand(...) / n
    ("pow-bwd-copy", 2 * _FP32, 0),               # self.pow(1)
    ("pow-bwd-scale", 2 * _FP32, 0),              # 2 * ...
    ("pow-bwd-mul", 3 * _FP32, 0),                # grad * ...
    ("accumulate", 3 * _FP32, 0),                 # x feeds pow and mul: the two grads added
    ("float-bwd", _FP32 + _BF16, 0),              # grad.to(bfloat16)
)
# the rotary embedding of one [tokens, width] projection (q or k), bf16 in and out
_ROPE_FWD = (
    ("float", _BF16 + _FP32),            # xq.float()
    ("complex-mul", 2 * _FP32),          # view_as_complex(...) * freqs_cis (complex64)
    ("type-as", _FP32 + _BF16),          # .type_as(xq)
)
_ROPE_BWD = (
    ("type-as-bwd", _BF16 + _FP32),      # grad.to(float32)
    ("complex-mul-bwd", 2 * _FP32),      # grad * freqs_cis.conj()
    ("float-bwd", _FP32 + _BF16),        # grad.to(bfloat16)
)
# SwiGLU on the [tokens, ffn] outputs of w1 and w3 (bf16)
_SWIGLU_FWD = (("silu", 2 * _BF16), ("mul", 3 * _BF16))
_SWIGLU_BWD = (("mul-bwd-gate", 3 * _BF16), ("mul-bwd-up", 3 * _BF16), ("silu-bwd", 3 * _BF16))


def _rmsnorm(table, prefix: str, tokens: int, width: int) -> list[Kernel]:
    return [(f"{prefix}-{name}", float(tokens * (width * per_elem + per_row)))
            for name, per_elem, per_row in table]


def rmsnorm_forward(prefix: str, tokens: int, width: int) -> list[Kernel]:
    """The eight kernels of torchtitan's ``RMSNorm.forward`` on ``tokens x width``.

    >>> [n for n, _ in rmsnorm_forward("norm1", 1, 8)][:3]
    ['norm1-float', 'norm1-pow', 'norm1-mean']
    >>> sum(b for _, b in rmsnorm_forward("n", 1, 1000)) // 1000  # 36 bytes an element
    36.0
    """
    return _rmsnorm(_RMSNORM_FWD, prefix, tokens, width)


def rmsnorm_backward(prefix: str, tokens: int, width: int) -> list[Kernel]:
    """Autograd's sixteen kernels for that norm's backward (92 bytes an element)."""
    return _rmsnorm(_RMSNORM_BWD, prefix, tokens, width)


def _per_width(table, prefix: str, tokens: int, widths: tuple[tuple[str, int], ...]) -> list[Kernel]:
    return [(f"{prefix}-{tag}-{name}", float(tokens * w * per_elem)) for tag, w in widths if w
            for name, per_elem in table]


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

    >>> repeat_kv_forward(1, 8, 8), [b for _, b in repeat_kv_forward(1, 8, 2)]
    ([], [20.0, 20.0])
    """
    if q_width == kv_width:
        return []
    per_token = float(tokens * (kv_width + q_width) * _BF16)
    return [("repeat-kv-k", per_token), ("repeat-kv-v", per_token)]


def repeat_kv_backward(tokens: int, q_width: int, kv_width: int) -> list[Kernel]:
    """The backward of ``expand``: the K and V gradients summed over the repeated heads."""
    return [(f"{name}-bwd", b) for name, b in repeat_kv_forward(tokens, q_width, kv_width)]


def swiglu_forward(tokens: int, ffn_width: int) -> list[Kernel]:
    """``F.silu(w1(x)) * w3(x)``: a SiLU kernel and a multiply."""
    return [(f"swiglu-{n}", float(tokens * ffn_width * b)) for n, b in _SWIGLU_FWD]


def swiglu_backward(tokens: int, ffn_width: int) -> list[Kernel]:
    """Its backward: the multiply's two input gradients, then ``silu_backward``."""
    return [(f"swiglu-{n}", float(tokens * ffn_width * b)) for n, b in _SWIGLU_BWD]

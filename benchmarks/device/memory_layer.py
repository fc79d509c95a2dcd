"""Measure the activation memory of torchtitan's Llama layer and loss on this GPU (needs torch).

llmsim's torchtitan rows predict peak memory 6-29% under what torchtitan logged. This measures,
on one GPU, what llmsim's activation model (``sim.memory.activation_model``) predicts for those
runs, piece by piece, with the layer written as torchtitan writes it (``eager_layer.py``'s
``Layer``: plain-PyTorch RMSNorm on ``x.float()``, complex RoPE, ``repeat_kv``, SDPA on
FlashAttention-2, SwiGLU) in BF16:

* **a layer's stored activations**: ``n`` layers run forward under torchtitan's activation
  checkpointing (``op``: its selective policy of December 2024, which saves the outputs of
  ``aten.mm`` except every second one, of SDPA and of the float8 amax ops, and recomputes the
  rest; ``full``: each layer's input only; ``none``), the memory allocated after the forward
  over ``n``, the last layer's output left out;
* **a layer's backward transient**: the peak allocated during the backward, less the stored
  activations still held and the weight gradients made so far, at its worst;
* **the output layer and loss**: torchtitan's ``cross_entropy(pred.flatten(0, 1).float(),
  labels)`` after the final norm and the vocabulary projection, forward and backward, its
  peak above what it was given;
* for each, ``max_memory_reserved`` beside ``max_memory_allocated`` (the caching allocator's
  overhead; run once with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` to see that
  allocator's).

It writes ``memory_layer.json`` to ``--out``. It runs on a lent H100/H200 only; nothing in
llmsim imports it.

    python benchmarks/device/memory_layer.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eager_layer import Layer, freqs, rmsnorm  # noqa: E402
from kernels import smi  # noqa: E402

GiB = 2**30
H, HEADS, KV, FFN, VOCAB = 4096, 32, 8, 14336, 128256  # Llama 3.1 8B
CASES = [  # (name, local batch, sequence, AC mode, layers)
    ("b2_s8192_op", 2, 8192, "op", 4),        # torchtitan Table 1/3: 8B, FSDP, selective (op) AC
    ("b1_s32768_full", 1, 32768, "full", 4),  # torchtitan Table 2, CP 1: full AC
    ("b2_s8192_none", 2, 8192, "none", 2),    # no AC, for reference
]

_SAVE = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_efficient_attention.default,
         torch.ops.aten._scaled_dot_product_flash_attention.default, torch.ops.aten.abs.default,
         torch.ops.aten.max.default}


def _op_policy():
    """torchtitan's selective (op) policy (``parallelize_llama.py``, December 2024)."""
    meta = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == torch.ops.aten.mm.default:
            meta[key] += 1
        save = func in _SAVE and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


def _run_layer(layer, x, f, mode):
    if mode == "none":
        return layer(x, f)
    if mode == "full":
        return checkpoint(layer, x, f, use_reentrant=False, preserve_rng_state=False)
    return checkpoint(layer, x, f, use_reentrant=False, preserve_rng_state=False, context_fn=_op_policy)


def layers_case(b, s, mode, n) -> dict:
    torch.manual_seed(0)
    layers = [Layer(H, HEADS, KV, FFN).cuda().to(torch.bfloat16) for _ in range(n)]
    f = freqs(H // HEADS, s)
    x = torch.randn(b, s, H, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(b, s, H, device="cuda", dtype=torch.bfloat16)
    weight_bytes = sum(p.numel() * p.element_size() for p in layers[0].parameters())
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        h = x
        for layer in layers:
            h = _run_layer(layer, h, f, mode)
        torch.cuda.synchronize()
        after_fwd = torch.cuda.memory_allocated()
        peak_fwd = torch.cuda.max_memory_allocated()
        out_bytes = h.numel() * h.element_size()
        stored = (after_fwd - base - out_bytes) / n
        torch.cuda.reset_peak_memory_stats()
        h.backward(g)
        torch.cuda.synchronize()
    peak_bwd = torch.cuda.max_memory_allocated()
    # at the first layer's backward (the last layer), n layers' activations are still held and
    # one layer's weight gradients are being made: what is above that is its transient
    transient = peak_bwd - base - n * stored - out_bytes - weight_bytes
    out = {"batch": b, "seq": s, "ac": mode, "layers": n, "stored_per_layer_gib": stored / GiB,
           "forward_peak_above_base_gib": (peak_fwd - base) / GiB,
           "backward_peak_above_base_gib": (peak_bwd - base) / GiB,
           "backward_transient_gib": transient / GiB, "weight_grad_gib_per_layer": weight_bytes / GiB,
           "max_reserved_gib": torch.cuda.max_memory_reserved() / GiB,
           "max_allocated_gib": torch.cuda.max_memory_allocated() / GiB}
    del layers, x, g, h
    return out


def loss_case(b, s) -> dict:
    torch.manual_seed(0)
    norm = torch.ones(H, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    head = torch.nn.Linear(H, VOCAB, bias=False).cuda().to(torch.bfloat16)
    h = torch.randn(b, s, H, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, VOCAB, (b, s), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    pred = head(rmsnorm(h, norm))
    loss = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
    del pred  # torchtitan's train step drops its reference before the backward
    torch.cuda.synchronize()
    after_fwd = torch.cuda.memory_allocated()
    peak_fwd = torch.cuda.max_memory_allocated()
    loss.backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    grads = sum(p.numel() * p.element_size() for p in head.parameters()) + h.numel() * h.element_size()
    return {"batch": b, "seq": s, "held_after_forward_gib": (after_fwd - base) / GiB,
            "forward_peak_above_base_gib": (peak_fwd - base) / GiB, "peak_above_base_gib": (peak - base) / GiB,
            "head_and_input_grads_gib": grads / GiB, "max_reserved_gib": torch.cuda.max_memory_reserved() / GiB,
            "max_allocated_gib": torch.cuda.max_memory_allocated() / GiB}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    t0 = time.time()
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "smi_before": smi(),
           "layers": [], "loss": []}
    for name, b, s, mode, n in CASES:
        try:
            row = {"case": name, **layers_case(b, s, mode, n)}
        except Exception as exc:  # noqa: BLE001
            row = {"case": name, "error": repr(exc)[:300]}
        res["layers"].append(row)
        print(json.dumps(row), f"{time.time() - t0:.0f}s", flush=True)
        torch.cuda.empty_cache()
    for b, s in ((2, 8192), (1, 32768)):
        try:
            row = loss_case(b, s)
        except Exception as exc:  # noqa: BLE001
            row = {"batch": b, "seq": s, "error": repr(exc)[:300]}
        res["loss"].append(row)
        print(json.dumps(row), f"{time.time() - t0:.0f}s", flush=True)
        torch.cuda.empty_cache()
    res["smi_after"] = smi()
    res["wall_s"] = time.time() - t0
    tag = "expandable" if "expandable_segments:True" in res["alloc_conf"] else "default"
    with open(f"{a.out}/memory_layer_{tag}.json", "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()

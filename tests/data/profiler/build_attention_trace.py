"""Write ``h100-attention.pt.trace.json``, the hand-built attention trace (README.md beside it).

::

    PYTHONPATH=. python tests/data/profiler/build_attention_trace.py

Each measured operator's kernels take ``FLOPs / (efficiency x 989 TFLOP/s) + 2 us`` in all,
its FLOPs as :class:`sim.workload.ops.AttentionOp` counts them, so a test reads the chosen
efficiency back. The output is deterministic (sorted keys, fixed ids and times).
"""

from __future__ import annotations

import json
from pathlib import Path

from sim.workload.ops import AttentionOp

OUT = Path(__file__).resolve().parent / "h100-attention.pt.trace.json"
PEAK = 989e12
LAUNCH_US = 2.0
PID, TID = 4242, 4242

events: list[dict] = []
_next_id = [10]
_ts = [1000.0]


def _id() -> int:
    _next_id[0] += 1
    return _next_id[0]


def _time_us(shape: tuple, backward: bool, efficiency: float) -> float:
    b, h, kh, s, d, causal = shape
    return round(AttentionOp(b, h, kh, s, d, causal, backward).flops / (efficiency * PEAK) * 1e6 + LAUNCH_US, 3)


def cpu_op(name: str, dims: list, types: list, concrete: list | None, dur: float = 80.0,
           inside: dict | None = None) -> dict:
    """A CPU operator after the previous one, or ``inside`` another (called from it)."""
    args = {"External id": _id(), "Record function id": 0, "Input Dims": dims, "Input type": types,
            "Sequence number": _next_id[0] + 100, "Fwd thread id": 0}
    if concrete is not None:
        args["Concrete Inputs"] = concrete
    ts = inside["ts"] + 20.0 if inside is not None else _ts[0]
    ev = {"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur, "args": args}
    if inside is None:
        _ts[0] += dur + 10.0
    events.append(ev)
    return ev


def kernels(op: dict, name: str, total_us: float, parts: int = 1, unlinked: int = -1) -> None:
    """``parts`` kernels launched by ``op`` summing to ``total_us``; the ``unlinked``-th carries
    no External id (linked by its runtime call's correlation)."""
    start = op["ts"] + 5.0
    left = total_us
    for i in range(parts):
        dur = round(total_us / parts, 3) if i < parts - 1 else round(left, 3)
        left -= dur
        corr = _id()
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": PID, "tid": TID,
                       "ts": start + i, "dur": 3.0, "args": {"External id": op["args"]["External id"], "cbid": 211,
                                                             "correlation": corr}})
        args = {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": corr}
        if i != unlinked:
            args["External id"] = op["args"]["External id"]
        events.append({"ph": "X", "cat": "kernel", "name": f"{name}_{i}" if parts > 1 else name, "pid": 0, "tid": 7,
                       "ts": 5000.0 + len(events) * 10.0, "dur": dur, "args": args})


BF16 = "c10::BFloat16"
FLASH = (2, 32, 8, 4096, 128, True)      # batch, heads, kv heads, seq, head dim, causal
CUDNN = (1, 64, 8, 8192, 128, True)

# FlashAttention-2 forward through scaled_dot_product_attention: the outer operator launches a
# small copy itself, the inner _flash_attention_forward the attention kernel (query b, s, h, d).
outer = cpu_op("aten::_scaled_dot_product_flash_attention", [[2, 32, 4096, 128], [2, 8, 4096, 128],
               [2, 8, 4096, 128], [], [], []], [BF16, BF16, BF16, "Scalar", "Scalar", "Scalar"],
               ["", "", "", "0.0", "True", "False"], dur=200.0)
kernels(outer, "void at::native::elementwise_kernel<128, 4>", 12.5)
inner = cpu_op("aten::_flash_attention_forward", [[2, 4096, 32, 128], [2, 4096, 8, 128], [2, 4096, 8, 128], [], [],
               [], [], [], [], []], [BF16, BF16, BF16, "", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"],
               ["", "", "", "", "", "4096", "4096", "0.0", "True", "False"], dur=150.0, inside=outer)
kernels(inner, "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>, true>",
        _time_us(FLASH, False, 0.30))

# its backward: three kernels (dot(dO, O), the backward, the dQ conversion), one linked by correlation
bwd = cpu_op("aten::_flash_attention_backward", [[2, 4096, 32, 128], [2, 4096, 32, 128], [2, 4096, 8, 128],
             [2, 4096, 8, 128], [2, 4096, 32, 128], [2, 32, 4096], [], [], [], [], [], [], [], []],
             [BF16, BF16, BF16, BF16, BF16, "float", "", "", "Scalar", "Scalar", "Scalar", "Scalar", "", ""],
             ["", "", "", "", "", "", "", "", "4096", "4096", "0.0", "True", "", ""])
kernels(bwd, "void pytorch_flash::flash_bwd_kernel", _time_us(FLASH, True, 0.27), parts=3, unlinked=1)

# cuDNN forward and backward (query b, h, s, d)
fwd = cpu_op("aten::_scaled_dot_product_cudnn_attention", [[1, 64, 8192, 128], [1, 8, 8192, 128],
             [1, 8, 8192, 128], [], [], [], [], []], [BF16, BF16, BF16, "", "Scalar", "Scalar", "Scalar", "Scalar"],
             ["", "", "", "", "True", "0.0", "True", "False"])
kernels(fwd, "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x128x128_4x1x1_kernel0_0",
        _time_us(CUDNN, False, 0.55))
cbwd = cpu_op("aten::_scaled_dot_product_cudnn_attention_backward", [[1, 64, 8192, 128], [1, 64, 8192, 128],
              [1, 8, 8192, 128], [1, 8, 8192, 128], [1, 64, 8192, 128], [1, 64, 8192, 1], [], [], [], [], [], [], [],
              [], []], [BF16, BF16, BF16, BF16, BF16, "float", "", "", "", "", "", "Scalar", "Scalar", "Scalar",
                        "Scalar"], ["", "", "", "", "", "", "", "", "", "", "", "8192", "8192", "0.0", "True"])
kernels(cbwd, "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_7_64x128x128_4x2x1_kernel0_0",
        _time_us(CUDNN, True, 0.50))

# not used: no Concrete Inputs; query and key lengths that differ; a packed (varlen) call; the
# memory-efficient backend; an FP32 call
nc = cpu_op("aten::_flash_attention_forward", [[1, 2048, 16, 128], [1, 2048, 16, 128], [1, 2048, 16, 128], [], [],
            [], [], [], [], []], [BF16, BF16, BF16, "", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"], None)
kernels(nc, "void pytorch_flash::flash_fwd_kernel", 100.0)
cross = cpu_op("aten::_scaled_dot_product_cudnn_attention", [[1, 16, 1024, 128], [1, 16, 4096, 128],
               [1, 16, 4096, 128], [], [], [], [], []], [BF16, BF16, BF16, "", "Scalar", "Scalar", "Scalar", "Scalar"],
               ["", "", "", "", "True", "0.0", "False", "False"])
kernels(cross, "cudnn_generated_fort_native_sdpa_sm90_flash_fprop", 50.0)
packed = cpu_op("aten::_flash_attention_forward", [[8192, 32, 128], [8192, 8, 128], [8192, 8, 128], [5], [5], [], [],
                [], [], []], [BF16, BF16, BF16, "int", "int", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"],
                ["", "", "", "", "", "4096", "4096", "0.0", "True", "False"])
kernels(packed, "void pytorch_flash::flash_fwd_splitkv_kernel", 300.0)
eff = cpu_op("aten::_efficient_attention_forward", [[1, 2048, 16, 64], [1, 2048, 16, 64], [1, 2048, 16, 64]],
             [BF16, BF16, BF16], ["", "", ""])
kernels(eff, "fmha_cutlassF_bf16_aligned_64x64_rf_sm80", 80.0)
fp32 = cpu_op("aten::_scaled_dot_product_cudnn_attention", [[1, 8, 1024, 64], [1, 8, 1024, 64], [1, 8, 1024, 64], [],
              [], [], [], []], ["float", "float", "float", "", "Scalar", "Scalar", "Scalar", "Scalar"],
              ["", "", "", "", "True", "0.0", "True", "False"])
kernels(fp32, "cudnn_sdpa_fp32", 40.0)

trace = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem":
         84929216512, "computeMajor": 9, "computeMinor": 0, "numSms": 132}], "record_shapes": 1,
         "displayTimeUnit": "ms", "baseTimeNanoseconds": 1700000000000000000,
         "traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": PID, "tid": TID,
                          "ts": 990.0, "dur": 9000.0, "args": {"External id": 1}}] + events}
OUT.write_text(json.dumps(trace, indent=1, sort_keys=True) + "\n")
print(f"wrote {OUT.name}: {len(events)} events")

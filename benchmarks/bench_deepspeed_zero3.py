"""DeepSpeed 0.3's ZeRO-3 against an external measurement: where
:data:`sim.workload.deepspeed_zero3.FETCH_HOST_S` comes from.

::

    python benchmarks/bench_deepspeed_zero3.py [--json PATH]

The measurement (deepspeedai/DeepSpeed issue #1174 and PR #1188, June 2021; not a validation
case): bing_bert with 5.1B parameters on one p4d.24xlarge (8 x A100, NVSwitch), DeepSpeed
0.3.16, no activation checkpointing. Forward ~480 ms under ZeRO-3 against ~60 ms under
ZeRO-2 (#1174); forward ~470 ms and backward ~900 ms under ZeRO-3 before #1188. The workload is
``benchmarks/deepspeed_zero3/bert5b_ds1174.yaml`` (its comments say what stands in for what).

The script simulates it three ways: ZeRO-2, and ZeRO-3 as DeepSpeed 0.3 issued it
(``zero_impl: deepspeed-0.3``) without and with the per-gather host time ``FETCH_HOST_S``. It
prints the forward and backward of each (rank 0's first-to-last span of the pass) next to the
measured ones, then the derivation of the constant: the ZeRO-3 forward's extra time over ZeRO-2
that llmsim does not price without it, less what bing_bert gathers that llmsim's GPT-style
model does not (its position embedding, pooler and prediction-head transform, about one h x h
gather each, and the decoder's re-gather of the tied word embedding), divided by the number of
gathered tensors in that forward. The derived value is printed beside the one in the code; the
backward, also measured, is not used to derive it and is printed as a check.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness import make_parser, write_json

from sim.config import load_workload_with_notes
from sim.runner import simulate
from sim.topology.choice import place_workload
from sim.workload import deepspeed_zero3 as ds3

WORKLOAD = Path(__file__).resolve().parent / "deepspeed_zero3" / "bert5b_ds1174.yaml"
FWD_ZERO3_MEASURED_S = (0.470, 0.480)
"""ZeRO-3 forward: ~470 ms (PR #1188, before) and ~480 ms (issue #1174)."""
FWD_ZERO2_MEASURED_S = 0.060
"""ZeRO-2 forward, ~60 ms (issue #1174)."""
BWD_ZERO3_MEASURED_S = 0.900
"""ZeRO-3 backward before PR #1188, ~900 ms."""
EXTRA_SMALL_GATHERS = 3
"""bing_bert gathers its position embedding (512 x h), pooler and prediction-head transform
(h x h each), which llmsim's GPT-style model does not have: priced as one h x h gather each."""
EXTRA_EMBEDDING_GATHERS = 1
"""The MLM decoder re-gathers the tied word embedding (released after the embedding module)."""


def _pass_s(run, phase: str) -> float:
    spans = [s for s in run.result.spans if s.rank == 0 and dict(s.args).get("phase") == phase]
    return max(s.end_s for s in spans) - min(s.start_s for s in spans)


def _gathers(run, phase: str) -> list:
    return [s for s in run.result.spans if s.rank == 0 and s.name == "ncclAllGather ds-param"
            and dict(s.args).get("phase") == phase]


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__)
    args = ap.parse_args(argv)
    w3, notes = load_workload_with_notes(str(WORKLOAD))
    topo = place_workload(w3, None, notes).topology
    w2 = dataclasses.replace(w3, parallel=dataclasses.replace(w3.parallel, zero_stage=2))
    kept = ds3.FETCH_HOST_S
    try:
        ds3.FETCH_HOST_S = 0.0
        bare = simulate(w3, topo)
    finally:
        ds3.FETCH_HOST_S = kept
    full = simulate(w3, topo)
    z2 = simulate(w2, topo)

    fwd = {k: _pass_s(r, "fwd") for k, r in (("zero2", z2), ("zero3_bare", bare), ("zero3", full))}
    bwd = {k: _pass_s(r, "bwd") for k, r in (("zero2", z2), ("zero3_bare", bare), ("zero3", full))}
    gathers = _gathers(bare, "fwd")
    by_size: dict[float, list[float]] = {}
    for s in gathers:
        by_size.setdefault(dict(s.op_args)["bytes"], []).append(s.end_s - s.start_s)
    h = w3.model.hidden_size
    hh = min(by_size, key=lambda b: abs(b - h * h * 2.0))
    emb = max(by_size)
    extra_s = (EXTRA_SMALL_GATHERS * min(by_size[hh]) + EXTRA_EMBEDDING_GATHERS * min(by_size[emb]))
    n = len(gathers) + EXTRA_SMALL_GATHERS + EXTRA_EMBEDDING_GATHERS
    measured_extra = sum(FWD_ZERO3_MEASURED_S) / 2 - FWD_ZERO2_MEASURED_S
    priced_extra = fwd["zero3_bare"] - fwd["zero2"] + extra_s
    derived = (measured_extra - priced_extra) / n

    print(f"bing_bert 5.1B ({w3.model.num_params() / 1e9:.2f}B here), 8 x A100, DeepSpeed 0.3 ZeRO-3 "
          f"(issue #1174, PR #1188)")
    print(f"  {'':28s} {'forward ms':>11s} {'backward ms':>12s}")
    print(f"  {'measured ZeRO-2':28s} {FWD_ZERO2_MEASURED_S * 1e3:11.0f} {'':>12s}")
    print(f"  {'measured ZeRO-3':28s} {'470-480':>11s} {BWD_ZERO3_MEASURED_S * 1e3:12.0f}")
    print(f"  {'llmsim ZeRO-2':28s} {fwd['zero2'] * 1e3:11.1f} {bwd['zero2'] * 1e3:12.1f}")
    print(f"  {'llmsim ZeRO-3, no host time':28s} {fwd['zero3_bare'] * 1e3:11.1f} {bwd['zero3_bare'] * 1e3:12.1f}")
    print(f"  {'llmsim ZeRO-3':28s} {fwd['zero3'] * 1e3:11.1f} {bwd['zero3'] * 1e3:12.1f}")
    print(f"  forward gathers: {len(gathers)} in llmsim's model + {EXTRA_SMALL_GATHERS + EXTRA_EMBEDDING_GATHERS} "
          f"bing_bert-only = {n}; those extra priced at {extra_s * 1e3:.1f} ms")
    print(f"  ZeRO-3 forward minus ZeRO-2: measured {measured_extra * 1e3:.0f} ms, priced "
          f"{priced_extra * 1e3:.1f} ms without host time")
    print(f"  host time per gathered tensor: derived {derived * 1e3:.3f} ms; "
          f"FETCH_HOST_S = {ds3.FETCH_HOST_S * 1e3:.3f} ms")
    write_json(args.json, {"forward_measured_zero2_s": FWD_ZERO2_MEASURED_S,
                           "forward_measured_zero3_s": list(FWD_ZERO3_MEASURED_S),
                           "backward_measured_zero3_s": BWD_ZERO3_MEASURED_S,
                           "forward_s": fwd, "backward_s": bwd, "forward_gathers": n,
                           "extra_gathers_priced_s": extra_s, "derived_fetch_host_s": derived,
                           "fetch_host_s": ds3.FETCH_HOST_S}, fields=(), sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

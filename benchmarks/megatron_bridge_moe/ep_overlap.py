"""Megatron-Bridge's DeepSeek-V3 row on 256 B200 under each dispatcher, with and without the EP
A2A overlap: what the row's recipe runs against what the case file says.

::

    python benchmarks/megatron_bridge_moe/ep_overlap.py
    python benchmarks/megatron_bridge_moe/ep_overlap.py --json ep_overlap.json

The row (``mbridge_26.04.01_DeepSeekV3_b200_256gpu_mxfp8``) says neither its dispatcher nor its
overlap, so ``llmsim validate`` prices it with Megatron-Core's all-to-all and no overlap. Its
recipe at the snapshot the case cites (Megatron-Bridge ``src/megatron/bridge/perf_recipes/
deepseek/b200/deepseek_v3.py``, ``deepseek_v3_pretrain_256gpu_b200_fp8mx_config``) runs the flex
dispatcher on DeepEP with ``overlap_moe_expert_parallel_comm`` and ``delay_wgrad_compute`` and
recomputes MLA's up-projections and the MLP (``recompute_modules = ["mla_up_proj", "mlp"]``).
The first five settings recompute the attention core (Megatron-Core's default modules) on
llmsim's split of the layers (``layout`` "llmsim": the embedding and the loss count as a layer
each and the MTP module as two, which for this model gives the recipe's layout), the sixth the
recipe's modules, the last the recipe's modules on its pipeline layout stated
(:data:`RECIPE_LAYOUT`); the table says whether each fits. Prints the iteration time, the
expert-parallel time left exposed and the error against the measured step (+: predicted
faster).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sim.config.workload import load_cases
from sim.output.report import make_report
from sim.runner import simulate
from sim.studies.validate import case_topology

HERE = Path(__file__).resolve().parent
CASE = "mbridge_26.04.01_DeepSeekV3_b200_256gpu_mxfp8"
RECIPE_LAYOUT = (4,) * 15 + (1,)
"""The recipe's pipeline layout for PP 8 x 2 virtual stages (Megatron-Bridge
``_get_deepseek_v3_pipeline_layout``: the embedding and 4 layers, 4 layers on each of the next
14 virtual stages, then 1 layer with the MTP layer and the loss)."""
SETTINGS = (
    ("alltoall", False, False, "core_attn", None),
    ("alltoall", True, False, "core_attn", None),
    ("deepep", False, False, "core_attn", None),
    ("deepep", True, False, "core_attn", None),
    ("deepep", True, True, "core_attn", None),
    ("deepep", True, True, "mla_up_proj,mlp", None),
    ("deepep", True, True, "mla_up_proj,mlp", RECIPE_LAYOUT),
)
"""(dispatcher, ep_overlap, delay_wgrad, recompute_modules, pipeline_layout) in the order printed;
the last is the recipe's (None: llmsim's split)."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    args = ap.parse_args(argv)
    rows = []
    for dispatcher, overlap, delay, modules, layout in SETTINGS:
        sets = [f"parallel.moe_dispatcher={dispatcher}", f"parallel.ep_overlap={str(overlap).lower()}",
                f"parallel.delay_wgrad={str(delay).lower()}", "parallel.recompute=selective",
                f"parallel.recompute_modules=[{modules}]"]
        if layout is not None:
            sets.append(f"parallel.pipeline_layout=[{','.join(map(str, layout))}]")
        (_, w), = [c for c in load_cases(str(HERE / "cases.yaml"), sets) if c[0] == CASE]
        if isinstance(w, Exception):
            raise SystemExit(f"{CASE}: {w}")
        run = simulate(w, case_topology(w))
        rep = make_report(run)
        tokens = w.parallel.global_batch_size * w.model.seq_length
        measured = tokens / (3328 * w.system.num_gpus)  # the row's 3,328 tokens/s per GPU
        rows.append(dict(dispatcher=dispatcher, ep_overlap=overlap, delay_wgrad=delay, recompute_modules=modules,
                         recipe_layout=layout is not None,
                         iteration_time_s=rep.iteration_time_s, exposed_ep_s=rep.exposed_comm_s["ep"],
                         measured_iteration_time_s=measured,
                         error_pct=100.0 * (measured - rep.iteration_time_s) / measured,
                         fits=all(s.fits for s in rep.stages),
                         peak_memory_gib=max(s.peak_memory_bytes for s in rep.stages) / 2**30))
    print(f"{CASE}, recompute selective (measured {rows[0]['measured_iteration_time_s']:.2f} s):")
    print(f"  {'dispatcher':10s} {'overlap':>7s} {'delay':>6s} {'modules':>16s} {'layout':>7s} {'iteration s':>12s} "
          f"{'EP exposed s':>13s} {'error':>7s}  peak GiB")
    for r in rows:
        print(f"  {r['dispatcher']:10s} {str(r['ep_overlap']):>7s} {str(r['delay_wgrad']):>6s} "
              f"{r['recompute_modules']:>16s} {'recipe' if r['recipe_layout'] else 'llmsim':>7s} "
              f"{r['iteration_time_s']:12.3f} {r['exposed_ep_s']:13.3f} {r['error_pct']:+6.1f}%  "
              f"{r['peak_memory_gib']:.1f}{'' if r['fits'] else ' (does not fit)'}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

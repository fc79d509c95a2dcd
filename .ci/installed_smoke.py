"""Run by .ci/run with an installed (not editable) llmsim, from a folder with no checkout:
the default simulation, the shipped validation cases, and every shipped preset by name.
Exits 1 naming the first command that fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import sim
from sim.config.presets import preset_root, presets

MODEL_OF = {"llama3-8b": "llama-3-8b"}  # Megatron launches whose tokenizer's vocabulary is in an HF config


def commands() -> list[list[str]]:
    out = [["run"], ["validate"], ["validate-infer"], ["presets"]]
    for p in presets():
        if p.group == "workloads":
            out.append(["run", p.name, "--granularity", "chunk"])
        elif p.group == "topologies":
            out.append(["run", "tiny", "--topology", p.name])
        elif p.group == "models":
            out.append(["infer", p.name, "--gpu", "H100-SXM5-80GB", "--tp", "8", "--generate", "2"])
        elif p.group == "megatron-args":
            argv = ["memory", "--megatron-args", f"@{p.name}", "--set", "system.gpu=H100-SXM5-80GB"]
            out.append(argv + (["--hf-config", MODEL_OF[p.name]] if p.name in MODEL_OF else []))
    return out


def main() -> int:
    here = Path.cwd()
    assert not (here / "workloads").exists(), "run from a folder with no checkout"
    assert Path(sim.__file__).parent / "data" == preset_root(), f"presets not from the package: {preset_root()}"
    for argv in commands():
        done = subprocess.run(["llmsim", *argv], capture_output=True, text=True)
        if done.returncode != 0 or "Traceback" in done.stderr:
            print(f"installed llmsim failed: llmsim {' '.join(argv)} (status {done.returncode})\n{done.stderr}",
                  file=sys.stderr)
            return 1
        last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        print(f"  ok  llmsim {' '.join(argv)}  | {last[:70]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

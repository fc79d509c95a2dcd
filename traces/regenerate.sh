#!/usr/bin/env bash
# Regenerate one example Chrome trace per workload preset: traces/<preset>.json.gz.
# Run from anywhere; needs `llmsim` on PATH (pip install -e .).
set -euo pipefail
cd "$(dirname "$0")/.."

for file in workloads/*.yaml; do          # the top level only: workloads/validation/ is skipped
    preset="$(basename "$file" .yaml)"
    echo "traces/$preset.json.gz"
    llmsim run "$preset" --trace "traces/$preset.json.gz" --json /dev/null > /dev/null
done
ls -l traces/*.json.gz

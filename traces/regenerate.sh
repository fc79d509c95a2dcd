#!/usr/bin/env bash
# Regenerate the example Chrome traces: traces/<preset>.json.gz for the presets below (the
# 1024-GPU DeepSeek-V3 and Llama 3 405B presets are left out to keep the repository small;
# `llmsim run deepseek-v3 --trace PATH` writes theirs). Run from anywhere; needs `llmsim` on
# PATH (pip install -e .).
set -euo pipefail
cd "$(dirname "$0")/.."

for preset in gpt3-175b gpt3-175b-1024 llama3-8b-h100 llama3-8b-hf mixtral-8x7b tiny; do
    echo "traces/$preset.json.gz"
    llmsim run "$preset" --trace "traces/$preset.json.gz" --json /dev/null > /dev/null
done
ls -l traces/*.json.gz

#!/usr/bin/env bash
# `make demo`: prepare the default corpus, train the demo model with progress, then print samples.
set -euo pipefail
bin=${1:-build/inkstone}
data=data/fortunes
run=runs/demo

if [[ ! -f $data/manifest.json ]]; then
  "$bin" data prepare --preset fortunes --tokenizer byte --out "$data"
fi
rm -rf "$run"
"$bin" train configs/ar-tiny.toml --run-dir "$run"
echo
echo "== 4 samples =="
"$bin" sample --run-dir "$run" --num 4 --max-new-tokens 160 --temperature 0.8 --top-p 0.95 --seed 1

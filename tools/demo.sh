#!/usr/bin/env bash
# `make demo`: prepare the default corpus, train the uniform-diffusion demo model with progress, print 4 samples.
set -euo pipefail
bin=${1:-build/inkstone}
data=data/fortunes
run=runs/demo

if [[ ! -f $data/manifest.json ]]; then
  "$bin" data prepare --preset fortunes --tokenizer byte --out "$data"
fi
rm -rf "$run"
"$bin" train configs/udlm-demo.toml --run-dir "$run"
echo
echo "== 4 samples, 64 denoising steps each =="
"$bin" sample --run-dir "$run" --num 4 --steps 64 --seed 1

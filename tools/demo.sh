#!/usr/bin/env bash
# `make demo`: learn a BPE tokenizer on the default corpus, prepare the corpus with it, train the uniform-diffusion
# demo model (the Sumi recipe on a short-conv hybrid, configs/demo.toml) with progress, print 4 samples.
set -euo pipefail
bin=${1:-build/inkstone}
data=data/fortunes-bpe
run=runs/demo

if [[ ! -f $data/manifest.json ]]; then
  "$bin" tokenizer train --preset fortunes --vocab 2048 --out "$data/tokenizer"
  "$bin" data prepare --preset fortunes --tokenizer "$data/tokenizer" --out "$data"
fi
rm -rf "$run"
"$bin" train configs/demo.toml --run-dir "$run"
echo
echo "== 4 samples, adaptive sampler, 64 denoising steps each =="
"$bin" sample --run-dir "$run" --num 4 --steps 64 --seed 1

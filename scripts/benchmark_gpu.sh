#!/usr/bin/env bash
# Issue 7's GPU measurement in one short call: base size (L12/H768), seq 128, bf16, batch 256 on one GPU;
# `mlmtrain pretrain` against the Hugging Face Trainer recipe and against the bare-step limit (3 interleaved
# rounds), with the model FLOPs utilisation
#     MFU = flops_per_token(sparse head) x tokens/s / 989e12   (H200 dense bf16 peak; --peak-tflops to change)
#
#   scripts/benchmark_gpu.sh                              # on a CUDA machine
#   scripts/benchmark_gpu.sh --batch 512 --set train.compile=true --set model.pad_vocab_multiple=64
#   scripts/benchmark_gpu.sh --quick                      # the same path with a tiny model: runs on CPU too
#
# Options after these are scripts/benchmark.py's and override the defaults below (the last one wins); --set goes to
# our side only. The HF side needs `datasets` and `accelerate`: benchmark.py stops with a clear message when one is
# missing (pip install -e ".[bench]" installs them).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
export PYTHONPATH="$repo/src${PYTHONPATH:+:$PYTHONPATH}"  # mlmtrain from this checkout, installed or not
export PYTHONUNBUFFERED=1

if [[ " $* " == *" --quick "* ]]; then
    defaults=(--sections throughput,limit)  # --quick's tiny sizes, on whatever device there is
else
    defaults=(--size base --seq-len 128 --batch 256 --precision bf16 --device cuda
              --steps 60 --warmup-steps 20 --rounds 3 --sections throughput,limit)
fi
exec "$python" "$repo/scripts/benchmark.py" "${defaults[@]}" "$@"

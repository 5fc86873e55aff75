#!/usr/bin/env bash
# Mixtures of experts on the GPU, after bench/gpu/check.sh built (or was given)
# the programs: configs/mixtral-tiny.json trained on the CUDA backend beside
# the CPU backend (the loss curves should agree to fp32 rounding), then a
# Mixtral-shaped model against a dense Llama with the same active parameters
# at bf16, seq 1024: tokens/s of each and their ratio.
#
# Usage: bench/gpu/moe_check.sh [--build-dir DIR]   (results in $OUT, else ./gpu-results)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${ZE_GPU_BUILD_DIR:-$repo/build-gpu}
[ "${1:-}" = --build-dir ] && build=$2
out=${OUT:-$PWD/gpu-results}
mkdir -p "$out"
train=$build/runtime/zero-train
summary=$out/moe_summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }

# 1. The same run on both backends (fp32, 100 steps).
for backend in cuda cpu; do
  timeout 300 "$train" --backend "$backend" --config "$repo/configs/mixtral-tiny.json" --steps 100 \
    --metrics "$out/mixtral_tiny_$backend.jsonl" > "$out/mixtral_tiny_$backend.log" 2>&1
  say "mixtral-tiny on $backend (exit $?): $(grep '^done:' "$out/mixtral_tiny_$backend.log")"
done

# 2. MoE against dense with the same active parameters (bf16, seq 1024, micro-batch 8, 30 steps).
shape=(--set model.n_layer=8 --set model.n_head=16 --set model.n_kv_head=8 --set model.d_model=1024
       --set model.vocab_size=32000 --set model.seq_len=1024 --set train_micro_batch_size_per_gpu=8
       --set bf16.enabled=true --set data.format=\"bytes\" --set steps_per_print=1)
# The bytes of the documentation pages (about half a megabyte), read as a byte model reads them.
data=(--set "data.path=\"$repo/docs\"" --set model.vocab_size=256)
timeout 300 "$train" --backend cuda --config "$repo/configs/mixtral-tiny.json" "${shape[@]}" "${data[@]}" \
  --set model.moe_intermediate_size=2048 --steps 30 --metrics "$out/moe_8x2.jsonl" > "$out/moe_8x2.log" 2>&1
say "MoE 8 experts x 2, expert_d_ff 2048 (exit $?): $(grep -E '^model:' "$out/moe_8x2.log")"
say "    $(grep '^done:' "$out/moe_8x2.log")"
timeout 300 "$train" --backend cuda --config "$repo/configs/llama-tiny.json" "${shape[@]}" "${data[@]}" \
  --set model.d_ff=4096 --steps 30 --metrics "$out/dense_4096.jsonl" > "$out/dense_4096.log" 2>&1
say "dense d_ff 4096 (exit $?): $(grep -E '^model:' "$out/dense_4096.log")"
say "    $(grep '^done:' "$out/dense_4096.log")"
# tokens/s over steps 11-30 of each, and their ratio: while the router's
# choices still move, each expert's row count changes every step and the
# device allocator grows to new sizes (the first ten steps run at a half to
# a third of the steady rate).
rate() { awk 'match($0, /"tokens_per_s":[0-9.eE+-]+/) { n++; if (n >= 11) { s += substr($0, RSTART + 15, RLENGTH - 15); m++ } } END { if (m) printf "%.0f", s / m; else print 0 }' "$1"; }
moe=$(rate "$out/moe_8x2.jsonl"); dense=$(rate "$out/dense_4096.jsonl")
say "tokens/s (steps 11-30): MoE $moe, dense $dense, MoE / dense $(awk -v a="$moe" -v b="$dense" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "n/a" }')"

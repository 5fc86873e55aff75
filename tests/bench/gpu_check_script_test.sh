#!/usr/bin/env bash
# bench/gpu/check.sh without a GPU or a build: its syntax, its usage errors,
# a --dry-run that names every phase with the command it would run, and a
# full run against stand-ins (cmake, ctest, nvidia-smi on PATH; zero-train,
# zero-data and the GEMM bench in a fake build directory) that checks what
# the script makes of their output: the micro-batch halving on out-of-memory,
# tokens/s and MFU from the metrics and the GEMM bench's JSON, and a failure
# when tests skip on a GPU machine. (The --cpu-only run, which really builds
# with CUDA, is too slow for ctest; see bench/gpu/check.sh.)
# Usage: gpu_check_script_test.sh PATH/TO/check.sh
set -euo pipefail
script=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

bash -n "$script" || fail "bash -n $script"

set +e
bash "$script" --no-such-flag > "$tmp/usage.out" 2>&1
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "unknown flag: exit $rc, expected 2"
grep -q 'unknown argument --no-such-flag' "$tmp/usage.out" || fail "unknown flag not named: $(cat "$tmp/usage.out")"
bash "$script" --help | grep -q -- '--cpu-only' || fail "--help does not describe --cpu-only"

OUT=$tmp/results bash "$script" --dry-run --build-dir "$tmp/build" > "$tmp/dry.out" 2>&1 || fail "--dry-run exited non-zero: $(cat "$tmp/dry.out")"
summary=$tmp/results/summary.txt
[ -s "$summary" ] || fail "--dry-run wrote no $summary"
for phase in configure build ctest_cuda_ops gpt_training data gemm_bench gpt2_stage0_mb32 gpt2_stage3_mb32; do
  grep -q "^\[dry-run\] $phase " "$summary" || fail "phase $phase missing from the dry run: $(cat "$summary")"
done
grep -q -- '-DCMAKE_CUDA_ARCHITECTURES=90' "$summary" || fail "configure does not pin sm_90"
grep -q -- "-B $tmp/build " "$summary" || fail "--build-dir not used"
grep -q -- 'ctest --test-dir .* -L cuda ' "$summary" || fail "no ctest -L cuda"
grep -q -- '--backend cuda' "$summary" || fail "the timing does not use zero-train --backend cuda"
grep -q -- '--set bf16.enabled=true' "$summary" || fail "the timing is not bf16"
grep -q -- 'model.seq_len=1024' "$summary" || fail "the timing is not at seq 1024"
grep -q '124475904 parameters' "$summary" || fail "GPT-2 124M parameter count wrong: $(grep parameters "$summary")"
grep -q 'budget' "$summary" || fail "no closing line"
# Nothing was built or run.
[ ! -e "$tmp/build" ] || fail "--dry-run created the build directory"

# ---- a full run against stand-ins
bin=$tmp/bin fake=$tmp/fake-build
mkdir -p "$bin" "$fake/runtime" "$fake/bench/gpu"
cat > "$bin/cmake" <<'EOF_CMAKE'
#!/usr/bin/env bash
for a in "$@"; do [ "$a" = --build ] && { echo "[111/111] Linking CXX executable runtime/zero-train"; exit 0; }; done
echo "--   [x] CUDA 13.0.88 + cuBLAS: the CUDA backend (archs: 90)"
EOF_CMAKE
cat > "$bin/ctest" <<'EOF_CTEST'
#!/usr/bin/env bash
if [[ " $* " == *" -R GpuTrainingTest "* ]]; then
  echo "1: fp32_stage0: loss 6.2764 -> 4.2713 (cpu) / 6.2764 -> 4.2714 (cuda); worst relative difference ..."
  echo "4: device memory over a run: driver +2.80 GiB, tracked reserved +2.79 GiB ..."
  echo "100% tests passed out of 4"  # newer ctest: no failed count when none failed
else
  echo "100% tests passed, 0 tests failed out of 29"
  [ -n "${FAKE_SKIP:-}" ] && printf 'The following tests did not run:
	 1 - GemmTest.X (Skipped)
'
fi
exit 0
EOF_CTEST
cat > "$bin/nvidia-smi" <<'EOF_SMI'
#!/usr/bin/env bash
echo "NVIDIA H200, 143771 MiB"
EOF_SMI
cat > "$fake/runtime/zero-data" <<'EOF_DATA'
#!/usr/bin/env bash
while [ $# -gt 0 ]; do [ "$1" = --out ] && : > "$2_train_000000.bin"; shift; done  # zero-data tokenize --out PREFIX
EOF_DATA
cat > "$fake/bench/gpu/gpu_gemm_bench" <<'EOF_GEMM'
#!/usr/bin/env bash
for a in "$@"; do case "$a" in --benchmark_out=*) out=${a#--benchmark_out=} ;; esac; done
cat > "$out" <<'EOF_JSON'
{ "benchmarks": [
    { "name": "BM_CublasBf16/4096^3/min_time:0.500/manual_time", "run_name": "x", "TFLOP/s": 6.5e+02 },
    { "name": "BM_CublasBf16/8192^3/min_time:0.500/manual_time", "run_name": "x", "TFLOP/s": 7.0e+02 },
    { "name": "BM_OpsMatmulBf16/gpt2_fc/min_time:0.300/manual_time", "run_name": "x", "TFLOP/s": 9.9e+02 }
] }
EOF_JSON
EOF_GEMM
# zero-train: micro-batches above 16 run out of memory; others take 0.5 s a step.
cat > "$fake/runtime/zero-train" <<'EOF_TRAIN'
#!/usr/bin/env bash
mb=0 metrics="" steps=0
while [ $# -gt 0 ]; do
  case "$1" in
    --set) case "$2" in train_micro_batch_size_per_gpu=*) mb=${2#*=} ;; esac; shift ;;
    --metrics) metrics=$2; shift ;;
    --steps) steps=$2; shift ;;
  esac
  shift
done
if [ "$mb" -gt 16 ]; then
  echo "check failed: kernels/backend.cc:36: out of device memory allocating 6.1 GiB for activations" >&2
  exit 134
fi
for i in $(seq 1 "$steps"); do
  t=0.5; [ "$i" -le 2 ] && t=3.0
  echo "{\"loss\":5.0,\"step\":$i,\"step_time_s\":$t,\"tokens_per_s\":1.0}" >> "$metrics"
done
echo "peak memory (device): parameters 237 MiB, total 40.0 GiB allocated, 41.0 GiB reserved"
echo "done: $steps steps in 9s"
EOF_TRAIN
chmod +x "$bin"/* "$fake/runtime/"* "$fake/bench/gpu/"*

PATH=$bin:$PATH OUT=$tmp/full bash "$script" --build-dir "$fake" > "$tmp/full.out" 2>&1 \
  || fail "full run against stand-ins failed: $(cat "$tmp/full.out")"
summary=$tmp/full/summary.txt
expect() { grep -qF -- "$1" "$summary" || fail "summary lacks \"$1\": $(cat "$summary")"; }
expect "GPU: NVIDIA H200, 143771 MiB"
expect "[PASS] ctest -L cuda: CUDA ops against the CPU backend: 29 tests: 0 failed, 0 skipped"
expect "[PASS] ctest -L cuda: GPT training GPU vs CPU (fp32, bf16, stage 3) and device memory vs cudaMemGetInfo: 4 tests: 0 failed, 0 skipped"
expect "fp32_stage0: loss 6.2764 -> 4.2713"
expect "bf16 GEMM rate (cuBLAS, best square shape): 700.0 TFLOP/s"
expect "stage 0, micro-batch 32: out of device memory; halving"
# 16 x 1024 tokens per 0.5 s step (steps 3-8) = 32768 tokens/s; x 860101632 FLOPs = 28.2 TFLOP/s = 4.0 % of 700.
expect "[PASS] GPT-2 124M bf16, seq 1024, ZeRO stage 0, micro-batch 16 (largest that fits, halving from 32): 32768 tokens/s, 0.500 s/step over 6 steps, 28.2 TFLOP/s, MFU 4.0% of the measured bf16 GEMM rate"
expect "[PASS] GPT-2 124M bf16, seq 1024, ZeRO stage 3, micro-batch 16 (largest that fits, halving from 16)"
expect "peak memory (device): parameters 237 MiB"
expect "0 failure(s)"

# A skipped CUDA test on a GPU machine is a failure.
if PATH=$bin:$PATH FAKE_SKIP=1 OUT=$tmp/skip bash "$script" --build-dir "$fake" > "$tmp/skip.out" 2>&1; then
  fail "a skipped test on a GPU machine passed: $(cat "$tmp/skip/summary.txt")"
fi
grep -q "nothing may skip" "$tmp/skip/summary.txt" || fail "skip not explained: $(cat "$tmp/skip/summary.txt")"

# --prebuilt: no configure or build, the same phases after them.
PATH=$bin:$PATH OUT=$tmp/prebuilt bash "$script" --prebuilt --build-dir "$fake" > "$tmp/prebuilt.out" 2>&1 \
  && fail "--prebuilt passed without the CUDA tests' ctest file"
grep -q "lacks tests/kernels/cuda/CTestTestfile.cmake" "$tmp/prebuilt/summary.txt" \
  || fail "--prebuilt did not name what it lacks: $(cat "$tmp/prebuilt/summary.txt")"
mkdir -p "$fake/tests/kernels/cuda" && touch "$fake/tests/kernels/cuda/CTestTestfile.cmake"
PATH=$bin:$PATH OUT=$tmp/prebuilt bash "$script" --prebuilt --build-dir "$fake" > "$tmp/prebuilt.out" 2>&1 \
  || fail "--prebuilt failed: $(cat "$tmp/prebuilt.out")"
[ ! -e "$tmp/prebuilt/configure.log" ] && [ ! -e "$tmp/prebuilt/build.log" ] || fail "--prebuilt configured or built"
grep -qF "[PASS] prebuilt: $fake" "$tmp/prebuilt/summary.txt" || fail "--prebuilt not reported"
grep -qF "[PASS] GPT-2 124M bf16, seq 1024, ZeRO stage 3" "$tmp/prebuilt/summary.txt" || fail "--prebuilt skipped the timing"

echo "check.sh: syntax, usage errors, --dry-run and a full run against stand-ins OK"

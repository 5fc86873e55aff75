#!/usr/bin/env bash
# The prepared GPU check: what this project needs to learn from a GPU machine,
# in one run of under 8 minutes on one H200, every phase under `timeout`.
#
#   a  configure and build with CUDA (sm_90) into its own build directory
#   b  ctest -L cuda: every CUDA op against the CPU backend
#   c  the GPU-vs-CPU GPT training comparison and the device-memory check
#      (tests/kernels/cuda/gpt_training_test.cc; the rest of ctest -L cuda)
#   d  GPT-2 124M (configs/gpt2-124m.json's shapes, bf16, seq 1024) through
#      zero-train --backend cuda at ZeRO stages 0 and 3, at the largest
#      micro-batch that fits (halving from 32): tokens/s and MFU, where MFU =
#      (6 N + 12 L d T) x tokens/s over the bf16 GEMM rate cuBLAS reaches in
#      this same run (bench/gpu/gemm_bench.cc)
#   e  with two or more GPUs, the same run at tensor_parallel.autotp_size 2 on
#      two of them (tokens/s beside the stage-0 line); skipped, saying why, on one
#   f  everything under $OUT (else ./gpu-results): summary.txt, one log per
#      phase, the GEMM bench's JSON, zero-train's metrics
#
# Usage: bench/gpu/check.sh [--cpu-only | --dry-run] [--prebuilt] [--build-dir DIR]
#   --cpu-only  what needs no GPU: a and b/c (which must then pass with every
#               test skipped), the synthetic data, and zero-train --backend
#               cuda failing with a clear message
#   --dry-run   print each phase's command and write summary.txt; runs nothing
#   --prebuilt  skip a (configure, build): the build directory already holds
#               the programs and tests, built on another machine (a GPU
#               machine without this project's Debian packages: bench/gpu/
#               pack.sh packs them with the shared libraries they need)
# Environment: OUT (results folder), ZE_GPU_BUILD_DIR (default build-gpu),
#   ZE_GPU_JOBS (build jobs; nproc), ZE_GPU_MAX_MICRO_BATCH (32),
#   ZE_GPU_STEPS (8 optimizer steps per timing run, the first 2 not timed),
#   ZE_GPU_BUDGET_S (450: no phase starts or runs past this many seconds).
# Exit status: 0 when every phase that ran passed, 1 otherwise, 2 bad usage.
# No network: the token data is the repository's own text, made into an
# llm.c shard by zero-data.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mode=full
prebuilt=0
build=${ZE_GPU_BUILD_DIR:-$repo/build-gpu}
usage() {
  cat <<'EOF_USAGE'
usage: bench/gpu/check.sh [--cpu-only | --dry-run] [--prebuilt] [--build-dir DIR]
  (none)      every phase: build, ctest -L cuda, GPT training GPU vs CPU,
              GEMM bench, GPT-2 124M timing at ZeRO stages 0 and 3
  --cpu-only  the phases that need no GPU (tests must skip, zero-train
              --backend cuda must fail clearly)
  --dry-run   print what each phase would run; runs nothing
  --prebuilt  use the build directory as it is (no configure, no build)
  --build-dir DIR  build directory (default: build-gpu in the repository)
Results go to $OUT, else ./gpu-results (summary.txt and one log per phase).
EOF_USAGE
}
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-only) mode=cpu-only ;;
    --dry-run) mode=dry-run ;;
    --prebuilt) prebuilt=1 ;;
    --build-dir) [ $# -ge 2 ] || { usage >&2; exit 2; }; build=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "check.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
case "$build" in /*) ;; *) build=$PWD/$build ;; esac

out=${OUT:-$PWD/gpu-results}
jobs=${ZE_GPU_JOBS:-$(nproc 2>/dev/null || echo 4)}
max_mb=${ZE_GPU_MAX_MICRO_BATCH:-32}
steps=${ZE_GPU_STEPS:-8}
timed_from=3  # first timed step: step 1 loads kernels and grows the allocator, step 2 settles
# cpu-only builds on whatever machine it is given (2 cores: tens of minutes).
if [ "$mode" = cpu-only ]; then budget=${ZE_GPU_BUDGET_S:-7200}; else budget=${ZE_GPU_BUDGET_S:-450}; fi
mkdir -p "$out" || { echo "check.sh: cannot create $out" >&2; exit 1; }
summary=$out/summary.txt
: > "$summary"
start_s=$SECONDS
failures=0

say() { echo "$*" | tee -a "$summary"; }
remaining() { echo $((budget - (SECONDS - start_s))); }
elapsed() { echo $((SECONDS - start_s)); }

# run_phase NAME MAX_SECONDS CMD... : runs CMD under timeout with its output
# in $out/NAME.log; sets phase_rc (124: timed out; 125: not started, no time
# left) and records the outcome.
phase_rc=0
run_phase() {
  local name=$1 max=$2
  shift 2
  local left limit
  left=$(remaining)
  # The per-phase limits are sized for a 16-core GPU machine; --cpu-only runs
  # anywhere (2 cores: the build alone takes tens of minutes) within the budget.
  [ "$mode" = cpu-only ] && max=$left
  limit=$(( max < left - 5 ? max : left - 5 ))
  if [ "$mode" = dry-run ]; then
    say "[dry-run] $name (timeout ${max}s): $*"
    phase_rc=0
    return 0
  fi
  if [ "$limit" -lt 10 ]; then
    say "[SKIPPED] $name: the ${budget}s budget is spent"
    phase_rc=125
    failures=$((failures + 1))
    return 0
  fi
  local t0=$SECONDS
  echo "== $name (timeout ${limit}s): $*" | tee -a "$out/check.log"
  timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
  phase_rc=$?
  local took=$((SECONDS - t0))
  if [ "$phase_rc" -eq 0 ]; then
    echo "   ok in ${took}s" | tee -a "$out/check.log"
  elif [ "$phase_rc" -eq 124 ] || [ "$phase_rc" -eq 137 ]; then
    echo "   TIMED OUT after ${took}s (see $name.log)" | tee -a "$out/check.log"
  else
    echo "   exit $phase_rc after ${took}s (see $name.log)" | tee -a "$out/check.log"
  fi
  return 0
}

# A phase whose exit status decides pass/fail on its own.
expect_ok() {  # NAME WHAT
  [ "$mode" = dry-run ] && return 0
  if [ "$phase_rc" -eq 0 ]; then say "[PASS] $2"; else say "[FAIL] $2 (exit $phase_rc, see $1.log)"; failures=$((failures + 1)); fi
}

say "ZeroEngine GPU check ($mode) — $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc 2>/dev/null) cores, repository $repo"
if [ "$mode" != dry-run ]; then
  {
    echo "== nvidia-smi"; nvidia-smi 2>&1 || echo "(no nvidia-smi)"
    echo "== nvcc"; /usr/local/cuda/bin/nvcc --version 2>&1 || nvcc --version 2>&1 || echo "(no nvcc)"
    echo "== git"; git -C "$repo" log -1 --oneline 2>&1; git -C "$repo" status --short 2>&1 | head -50
  } > "$out/environment.txt" 2>&1
  gpu_name=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)
  say "GPU: ${gpu_name:-none visible to nvidia-smi}"
fi

# ---- a: configure and build -------------------------------------------------
generator=()
if [ "$prebuilt" -eq 1 ]; then
  missing=()
  for f in runtime/zero-train runtime/zero-data bench/gpu/gpu_gemm_bench tests/kernels/cuda/CTestTestfile.cmake; do
    [ -e "$build/$f" ] || missing+=("$f")
  done
  if [ ${#missing[@]} -gt 0 ] && [ "$mode" != dry-run ]; then
    say "[FAIL] --prebuilt: $build lacks ${missing[*]}"
    exit 1
  fi
  say "[PASS] prebuilt: $build (not configured or built here)"
else
  command -v ninja > /dev/null 2>&1 && generator=(-G Ninja)
  run_phase configure 120 cmake -S "$repo" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DZE_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
  expect_ok configure "configure with CUDA into $build"
  if [ "$mode" != dry-run ] && [ "$phase_rc" -eq 0 ] && ! grep -q '\[x\] CUDA' "$out/configure.log"; then
    say "[FAIL] CMake did not find CUDA (see configure.log); nothing GPU-side can be built"
    failures=$((failures + 1))
    phase_rc=1
  fi
  if [ "$phase_rc" -ne 0 ]; then
    say "stopping: no build"
    exit 1
  fi
  # tests/kernels/cuda/all: every CUDA test (a per-directory target of the Ninja generator).
  targets=(zero-train zero-data gpu_gemm_bench)
  if [ ${#generator[@]} -gt 0 ]; then targets+=(tests/kernels/cuda/all); else targets=(all); fi
  run_phase build 300 cmake --build "$build" -j "$jobs" --target "${targets[@]}"
  expect_ok build "build ${targets[*]} (-j $jobs)"
  if [ "$phase_rc" -ne 0 ]; then
    [ "$mode" = dry-run ] || tail -30 "$out/build.log" | sed 's/^/    /' >> "$summary"
    say "stopping: the build failed"
    exit 1
  fi
fi

# ---- b, c: ctest -L cuda, in two parts ---------------------------------------
# ctest_counts LOG: "N tests: F failed, S skipped"
ctest_counts() {
  local log=$1 total failed skipped
  # "100% tests passed, 0 tests failed out of 29" (CMake 3.25); newer ctest
  # drops the failed count when it is 0: "100% tests passed out of 11".
  total=$(sed -n 's/.*tests passed,* .*out of \([0-9]*\).*/\1/p' "$log" | tail -1)
  failed=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of.*/\1/p' "$log" | tail -1)
  [ -z "$failed" ] && grep -q '100% tests passed out of' "$log" && failed=0
  skipped=$(grep -c '(Skipped)' "$log")
  echo "${total:-0} tests: ${failed:-?} failed, ${skipped} skipped"
}
check_ctest() {  # NAME WHAT
  local name=$1 what=$2 counts skipped
  [ "$mode" = dry-run ] && return 0
  counts=$(ctest_counts "$out/$name.log")
  skipped=$(grep -c '(Skipped)' "$out/$name.log")
  if [ "$phase_rc" -ne 0 ]; then
    say "[FAIL] $what: $counts (see $name.log)"
    failures=$((failures + 1))
  elif [[ "$counts" == "0 tests:"* ]]; then
    say "[FAIL] $what: $counts — no test ran, or ctest's summary line was not understood (see $name.log)"
    failures=$((failures + 1))
  elif [ "$mode" = full ] && [ "$skipped" -gt 0 ]; then
    say "[FAIL] $what: $counts — on a GPU machine nothing may skip (is the GPU visible to the tests?)"
    failures=$((failures + 1))
  elif [ "$mode" = cpu-only ] && [ "$skipped" -eq 0 ]; then
    say "[FAIL] $what: $counts — without a GPU every test should skip"
    failures=$((failures + 1))
  else
    say "[PASS] $what: $counts"
  fi
}
run_phase ctest_cuda_ops 150 ctest --test-dir "$build" -L cuda -E GpuTrainingTest --output-on-failure -j 8 \
  --timeout 120 --output-junit "$out/ctest_cuda_ops.xml"
check_ctest ctest_cuda_ops "ctest -L cuda: CUDA ops against the CPU backend"

run_phase gpt_training 180 ctest --test-dir "$build" -L cuda -R GpuTrainingTest -V --timeout 150 \
  --output-junit "$out/gpt_training.xml"
check_ctest gpt_training "ctest -L cuda: GPT training GPU vs CPU (fp32, bf16, stage 3) and device memory vs cudaMemGetInfo"
if [ "$mode" != dry-run ]; then
  grep -E '^[0-9]+: (fp32|bf16)_stage[03]: loss|device memory over a run' "$out/gpt_training.log" \
    | sed 's/^[0-9]*: /    /' >> "$summary"
fi

# ---- d: synthetic tokens, then zero-train on the GPU ---------------------------
data_dir=$out/data
corpus=$data_dir/corpus.txt
shard=$data_dir/tokens_train_000000.bin
if [ "$mode" != dry-run ]; then
  mkdir -p "$data_dir"
  # The repository's own sources: present wherever this script is, no network.
  find "$repo/runtime" "$repo/zero" "$repo/kernels" "$repo/tests" \( -name '*.cc' -o -name '*.h' -o -name '*.cu' \) \
    -print0 | sort -z | xargs -0 cat > "$corpus" 2>/dev/null
fi
# GPT-2-style BPE shards (the test tokenizer's 2001 ids fit GPT-2's table; byte shards would be refused).
run_phase data 60 "$build/runtime/zero-data" tokenize --tokenizer "$repo/tests/data/tokenizers/gpt2" \
  --input "$corpus" --val-fraction 0 --out "$data_dir/tokens"
expect_ok data "synthetic token shard (the repository's sources through the GPT-2-style test tokenizer, llm.c format)"

train=("$build/runtime/zero-train" --backend cuda --config "$repo/configs/gpt2-124m.json"
       --set model.seq_len=1024 --set bf16.enabled=true --set "data.path=\"$shard\"" --set steps_per_print=1)

if [ "$mode" = cpu-only ]; then
  run_phase zero_train_no_gpu 60 "${train[@]}" --steps 1
  if [ "$phase_rc" -eq 1 ] && grep -q -- '--backend cuda' "$out/zero_train_no_gpu.log" \
     && grep -qiE 'no CUDA device|cudaGetDeviceCount|built without the CUDA backend' "$out/zero_train_no_gpu.log"; then
    say "[PASS] zero-train --backend cuda without a GPU: exit 1, \"$(head -1 "$out/zero_train_no_gpu.log")\""
  else
    say "[FAIL] zero-train --backend cuda without a GPU: exit $phase_rc, expected 1 and a message naming the missing device (see zero_train_no_gpu.log)"
    failures=$((failures + 1))
  fi
fi

if [ "$mode" != cpu-only ]; then
  # The bf16 GEMM rate of this GPU, measured now.
  run_phase gemm_bench 120 "$build/bench/gpu/gpu_gemm_bench" --benchmark_out="$out/gemm_bench.json" \
    --benchmark_out_format=json
  expect_ok gemm_bench "GPU GEMM bench"
  peak_tflops=0
  if [ "$mode" = full ] && [ -s "$out/gemm_bench.json" ]; then
    # "NAME TFLOPS" per benchmark from Google Benchmark's JSON (any layout).
    awk '{
        line = $0
        while (match(line, /"(name|TFLOP\/s)": *("[^"]*"|[0-9.eE+-]+)/)) {
          kv = substr(line, RSTART, RLENGTH); line = substr(line, RSTART + RLENGTH)
          v = kv; sub(/^"[^"]*": */, "", v); gsub(/"/, "", v)
          if (kv ~ /^"name"/) { name = v; sub(/\/min_time.*/, "", name) } else print name, v
        }
      }' "$out/gemm_bench.json" > "$out/gemm_rates.txt"
    # The largest cuBLAS bf16 rate at the square shapes is the denominator.
    peak_tflops=$(awk '$1 ~ /^BM_CublasBf16\/[0-9]+\^3$/ && $2 + 0 > max { max = $2 + 0 } END { printf "%.1f", max + 0 }' \
      "$out/gemm_rates.txt")
    say "bf16 GEMM rate (cuBLAS, best square shape): $peak_tflops TFLOP/s"
    awk '{ printf "    %-34s %7.1f TFLOP/s\n", $1, $2 }' "$out/gemm_rates.txt" >> "$summary"
    if awk -v p="$peak_tflops" 'BEGIN { exit !(p <= 0) }'; then
      say "[FAIL] no bf16 GEMM rate in gemm_bench.json: MFU cannot be computed"
      failures=$((failures + 1))
    fi
  fi

  # GPT-2 124M: N parameters (tied head counted once) and training FLOPs per
  # token, as GptConfig::num_parameters / flops_per_token count them.
  L=12 d=768 V=50304 T=1024
  n_params=$((V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d))
  flops_per_token=$((6 * n_params + 12 * L * d * T))
  say "GPT-2 124M: $n_params parameters, $flops_per_token training FLOPs per token at seq $T (6N + 12 L d T)"

  # time_stage STAGE START_MB: halves the micro-batch from START_MB until a
  # run fits; sets found_mb (0 if none) and prints the result line.
  found_mb=0
  time_stage() {
    local stage=$1 mb=$2 first_mb=$2 name log metrics
    found_mb=0
    while [ "$mb" -ge 1 ]; do
      name=gpt2_stage${stage}_mb${mb}
      log=$out/$name.log
      metrics=$out/$name.metrics.jsonl
      rm -f "$metrics"
      run_phase "$name" 150 "${train[@]}" --set zero_optimization.stage="$stage" \
        --set train_micro_batch_size_per_gpu="$mb" --steps "$steps" --metrics "$metrics"
      [ "$mode" = dry-run ] && { found_mb=$mb; return 0; }
      if [ "$phase_rc" -eq 0 ]; then
        found_mb=$mb
        break
      fi
      if [ "$phase_rc" -ne 124 ] && [ "$phase_rc" -ne 125 ] && [ "$phase_rc" -ne 137 ] \
         && grep -qiE 'out of device memory|out of memory|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED' "$log"; then
        say "    stage $stage, micro-batch $mb: out of device memory; halving"
        mb=$((mb / 2))
        continue
      fi
      say "[FAIL] GPT-2 124M stage $stage, micro-batch $mb: exit $phase_rc (see $name.log):"
      grep -v '^step ' "$log" | tail -5 | sed 's/^/    /' >> "$summary"
      failures=$((failures + 1))
      return 0
    done
    if [ "$found_mb" -eq 0 ]; then
      say "[FAIL] GPT-2 124M stage $stage: no micro-batch fits"
      failures=$((failures + 1))
      return 0
    fi
    # Steps from $timed_from on: tokens/s = tokens per step / mean step time.
    local tokens=$((found_mb * T)) result
    result=$(awk -v from="$timed_from" -v tokens="$tokens" -v fpt="$flops_per_token" -v peak="$peak_tflops" '
      match($0, /"step_time_s":[0-9.eE+-]+/) {
        n++; if (n >= from) { t += substr($0, RSTART + 14, RLENGTH - 14); m++ } }
      END {
        if (m == 0 || t <= 0) { print "no timed steps"; exit 1 }
        tps = tokens * m / t; achieved = tps * fpt / 1e12
        printf "%.0f tokens/s, %.3f s/step over %d steps, %.1f TFLOP/s", tps, t / m, m, achieved
        if (peak > 0) printf ", MFU %.1f%% of the measured bf16 GEMM rate", 100 * achieved / peak
      }' "$out/gpt2_stage${stage}_mb${found_mb}.metrics.jsonl")
    if [ $? -ne 0 ]; then
      say "[FAIL] GPT-2 124M stage $stage, micro-batch $found_mb: $result (see gpt2_stage${stage}_mb${found_mb}.log)"
      failures=$((failures + 1))
      return 0
    fi
    say "[PASS] GPT-2 124M bf16, seq $T, ZeRO stage $stage, micro-batch $found_mb (largest that fits, halving from $first_mb): $result"
    grep -E '^(peak memory|device memory|done:)' "$out/gpt2_stage${stage}_mb${found_mb}.log" | sed 's/^/    /' >> "$summary"
  }
  time_stage 0 "$max_mb"
  stage0_mb=$found_mb
  # Stage 3 on one GPU holds the same state: start where stage 0 fit.
  [ "$stage0_mb" -ge 1 ] || stage0_mb=$max_mb
  time_stage 3 "$stage0_mb"

  # Tensor parallelism at T = 2 beside T = 1 (the stage-0 run above): two
  # ranks, one GPU each, NCCL sub-communicators. NCCL places one rank of a
  # communicator per GPU, so this needs two GPUs.
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if [ "$mode" = full ] && [ "${gpus:-0}" -ge 2 ] && [ "$stage0_mb" -ge 1 ]; then
    run_phase gpt2_tp2 "$(remaining)" mpirun --allow-run-as-root -np 2 "${train[@]}" \
      --set zero_optimization.stage=0 --set tensor_parallel.autotp_size=2 \
      --set train_micro_batch_size_per_gpu="$stage0_mb" --steps "$steps"
    if [ "$phase_rc" -eq 0 ]; then
      say "[PASS] GPT-2 124M at T=2 on 2 GPUs, micro-batch $stage0_mb: $(grep '^done:' "$out/gpt2_tp2.log")"
    else
      say "[FAIL] GPT-2 124M at T=2 on 2 GPUs: exit $phase_rc (see gpt2_tp2.log)"
      failures=$((failures + 1))
    fi
  else
    say "[SKIP] tensor parallelism T=2 vs T=1: ${gpus:-0} GPU(s) visible; NCCL needs one GPU per rank of a tensor group"
  fi
fi

say "total $(elapsed)s of a ${budget}s budget; $failures failure(s); logs in $out"
[ "$failures" -eq 0 ]

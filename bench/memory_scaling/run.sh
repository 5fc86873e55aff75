#!/usr/bin/env bash
# Memory scaling: real zero-train runs of bench/memory_scaling/gpt-50m.json (a
# 51M-parameter GPT, bf16 + AdamW) at ZeRO stages 0-3 on 1, 2, 4 and 8 ranks
# (mpirun, oversubscribed), at tensor-parallel sizes T (tensor_parallel.autotp_size;
# T must divide the ranks), with and without sequence parallelism
# (tensor_parallel.sequence_parallel, T > 1), each rank writing its own --metrics file. For every
# rank it collects the peak tracked bytes of each memory category and the
# process RSS, sets the planner's prediction (zero-estimate --json) beside
# each figure, and writes into bench/memory_scaling/results/:
#   memory_scaling.csv  stage, ranks, tensor, sp, rank, category, measured, planned, error
#   summary.csv         per stage, rank count, T and SP: the largest rank's total
#                       (measured, planned), its activations, its RSS, the
#                       worst category error
#   memory_scaling.png  bytes per rank vs ranks, one line per stage
#                       (measured solid, planned dashed)
# Usage: bench/memory_scaling/run.sh [BUILD_DIR]   (default: ./build)
# Environment: RANKS="1 2 4 8", STAGES="0 1 2 3", TENSORS="1", SP="0",
# STEPS=2, OUT=results (a folder of bench/memory_scaling), CONFIG=gpt-50m.json.
# About 6 minutes on 2 cores. The T axis: RANKS="4 8" STAGES="0 3"
# TENSORS="1 2 4" SP="0 1" OUT=results-tp; GPT-2 124M at T = 1, 2, 4 on 4
# ranks: CONFIG=bench/memory_scaling/gpt2-124m-tp.json RANKS=4 STAGES=0
# TENSORS="1 2 4" SP="0 1" STEPS=3 OUT=results-124m-tp.
# Needs mpirun, python3 and gnuplot (gnuplot-nox).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
ranks=${RANKS:-"1 2 4 8"}
stages=${STAGES:-"0 1 2 3"}
tensors=${TENSORS:-1}
sps=${SP:-0}
steps=${STEPS:-2}
config=${CONFIG:-$here/gpt-50m.json}
out=$here/${OUT:-results}
runs=$out/runs
train=$build/runtime/zero-train
estimate=$build/runtime/zero-estimate
for bin in "$train" "$estimate"; do
  [ -x "$bin" ] || { echo "run.sh: $bin is not built (cmake --build $build)" >&2; exit 2; }
done
command -v mpirun >/dev/null || { echo "run.sh: mpirun not found (openmpi-bin)" >&2; exit 2; }

rm -rf "$runs"
mkdir -p "$runs"
cd "$root"  # the config's data path is absolute; logs go to $runs
for n in $ranks; do
  for t in $tensors; do
    [ $(( n % t )) -eq 0 ] || continue
    for sp in $sps; do
    [ "$sp" = 0 ] || [ "$t" -gt 1 ] || continue
    for s in $stages; do
      tag=stage${s}_ranks${n}_tp${t}_sp${sp}
      echo "== stage $s on $n rank(s), T=$t, sequence parallel $sp"
      start=$(date +%s)
      spb=false; [ "$sp" = 1 ] && spb=true
      set_args=(--set zero_optimization.stage="$s" --set tensor_parallel.autotp_size="$t"
                --set tensor_parallel.sequence_parallel="$spb")
      # One OpenMP thread per rank: N ranks share the machine's cores.
      mpirun --allow-run-as-root --oversubscribe -np "$n" -x OMP_NUM_THREADS=1 \
        "$train" --config "$config" "${set_args[@]}" --steps "$steps" \
        --metrics "$runs/$tag.rank{rank}.jsonl" >"$runs/$tag.log" 2>&1 ||
        { echo "run.sh: zero-train failed, see $runs/$tag.log" >&2; tail -5 "$runs/$tag.log" >&2; exit 1; }
      # zero-train turns stage 3's overlap_comm off where the ranks leave its
      # communication thread no core (it says so); the plan is of that run.
      plan_args=()
      grep -q '^overlap_comm: off' "$runs/$tag.log" && plan_args=(--set zero_optimization.overlap_comm=false)
      "$estimate" --config "$config" "${set_args[@]}" "${plan_args[@]}" --world "$n" --json >"$runs/$tag.plan.json"
      echo "   $(( $(date +%s) - start )) s"
    done
    done
  done
done

python3 "$here/collect.py" "$runs" "$out"
if [ "$tensors" != 1 ]; then
  rm -f "$out/memory_scaling.dat"  # the plot is the T = 1 scaling; the T axis is the table
elif command -v gnuplot >/dev/null; then
  (cd "$out" && gnuplot "$here/plot.gp")
  echo "== wrote $out/memory_scaling.png"
else
  echo "run.sh: gnuplot not found (apt-get install gnuplot-nox): no plot" >&2
fi

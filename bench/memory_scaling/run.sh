#!/usr/bin/env bash
# Memory scaling: real zero-train runs of bench/memory_scaling/gpt-50m.json (a
# 51M-parameter GPT, bf16 + AdamW) at ZeRO stages 0-3 on 1, 2, 4 and 8 ranks
# (mpirun, oversubscribed), at tensor-parallel sizes T (tensor_parallel.autotp_size),
# with and without sequence parallelism (tensor_parallel.sequence_parallel, T > 1)
# and at pipeline depths P (pipeline.stages), world = D x T x P, each rank
# writing its own --metrics file. A combination runs only where T x P divides
# the ranks, T divides the model's n_head and P is at most its n_layer; ZeRO
# stage 3 is skipped at P > 1 (the engine refuses it). For every
# rank it collects the peak tracked bytes of each memory category and the
# process RSS, sets the planner's prediction (zero-estimate --json) beside
# each figure, and writes into bench/memory_scaling/results/:
#   memory_scaling.csv  stage, ranks, tensor, sp, pipeline, rank, category, measured, planned, error
#   summary.csv         per stage, rank count, T, SP and P: the largest rank's total
#                       (measured, planned), its activations, its RSS, the
#                       worst category error, the worst total error of any rank
#   memory_scaling.png  bytes per rank vs ranks, one line per stage
#                       (measured solid, planned dashed; T = P = 1 sweeps)
#   memory_3d.png       the largest rank's bytes per layout D x T x P and stage,
#                       measured beside planned (sweeps with PIPELINES != 1)
# Usage: bench/memory_scaling/run.sh [BUILD_DIR]   (default: ./build)
# Environment: RANKS="1 2 4 8", STAGES="0 1 2 3", TENSORS="1", SP="0",
# PIPELINES="1", ACCUM=1 (gradient_accumulation_steps: the pipeline's
# micro-batches), STEPS=2, OUT=results (a folder of bench/memory_scaling),
# CONFIG=gpt-50m.json.
# About 6 minutes on 2 cores. The T axis: RANKS="4 8" STAGES="0 3"
# TENSORS="1 2 4" SP="0 1" OUT=results-tp; GPT-2 124M at T = 1, 2, 4 on 4
# ranks: CONFIG=bench/memory_scaling/gpt2-124m-tp.json RANKS=4 STAGES=0
# TENSORS="1 2 4" SP="0 1" STEPS=3 OUT=results-124m-tp. The 3D sweep (every
# D x T x P = 8, 34 runs, 4-7 minutes): RANKS=8 TENSORS="1 2 4 8"
# PIPELINES="1 2 4 8" ACCUM=4 OUT=results-3d; the largest model per layout
# that fits a budget is bench/memory_scaling/largest_fit.py.
# Needs mpirun, python3 and gnuplot (gnuplot-nox).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
ranks=${RANKS:-"1 2 4 8"}
stages=${STAGES:-"0 1 2 3"}
tensors=${TENSORS:-1}
sps=${SP:-0}
pipelines=${PIPELINES:-1}
accum=${ACCUM:-1}
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
# The model's heads and layers bound T and P (the effective config, defaults
# filled in; --print-config annotates derived keys with // comments, hence no JSON parser).
effective=$("$train" --config "$config" --print-config)
n_head=$(sed -n 's/^ *"n_head": \([0-9]*\).*/\1/p' <<<"$effective" | head -1)
n_layer=$(sed -n 's/^ *"n_layer": \([0-9]*\).*/\1/p' <<<"$effective" | head -1)
[ -n "$n_head" ] && [ -n "$n_layer" ] || { echo "run.sh: no model.n_head/n_layer in $config" >&2; exit 2; }
for n in $ranks; do
  for p in $pipelines; do
  for t in $tensors; do
    [ $(( n % (t * p) )) -eq 0 ] || continue
    if [ $(( n_head % t )) -ne 0 ] || [ "$p" -gt "$n_layer" ]; then
      echo "== skip T=$t P=$p: the model has $n_head heads and $n_layer layers"; continue
    fi
    for sp in $sps; do
    [ "$sp" = 0 ] || [ "$t" -gt 1 ] || continue
    for s in $stages; do
      [ "$s" -lt 3 ] || [ "$p" -eq 1 ] || continue  # stage 3 does not combine with pipeline stages
      tag=stage${s}_ranks${n}_tp${t}_sp${sp}_pp${p}
      echo "== stage $s on $n rank(s), D=$(( n / (t * p) )) T=$t P=$p, sequence parallel $sp"
      start=$(date +%s)
      spb=false; [ "$sp" = 1 ] && spb=true
      set_args=(--set zero_optimization.stage="$s" --set tensor_parallel.autotp_size="$t"
                --set tensor_parallel.sequence_parallel="$spb" --set pipeline.stages="$p"
                --set gradient_accumulation_steps="$accum")
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
done

python3 "$here/collect.py" "$runs" "$out"
# The ranks plot is of T = P = 1 sweeps, the layout plot of sweeps over P; a
# sweep over T alone is the table.
plot=""
if [ "$pipelines" != 1 ]; then
  plot=plot3d.gp; png=memory_3d.png; rm -f "$out/memory_scaling.dat"
elif [ "$tensors" != 1 ]; then
  rm -f "$out/memory_scaling.dat"
else
  plot=plot.gp; png=memory_scaling.png
fi
[ "$plot" = plot3d.gp ] || rm -f "$out/memory_3d.dat"
if [ -n "$plot" ]; then
  if command -v gnuplot >/dev/null; then
    (cd "$out" && gnuplot -e "run='$(basename "$config"), ranks ${ranks// /,}, accumulation $accum'" "$here/$plot")
    echo "== wrote $out/$png"
  else
    echo "run.sh: gnuplot not found (apt-get install gnuplot-nox): no plot" >&2
  fi
fi

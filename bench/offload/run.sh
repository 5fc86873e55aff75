#!/usr/bin/env bash
# The offload headline: the largest GPT this machine trains with every model
# state in memory, the same model with 16-bit master weights and optimizer
# states, with its parameters alone on NVMe, with its optimizer state on NVMe, and models
# whose fp32 model states exceed the machine's memory trained with their
# optimizer state, then also their parameters, on NVMe. Each row is a real zero-train run of a few steps;
# the table gives the peak RSS (VmHWM), the tracked model-state bytes in host
# memory and on NVMe, and the step time (median of the steps after the
# first), and goes to bench/offload/results/table.md.
#
# Usage: bench/offload/run.sh [BUILD_DIR]   (default: ./build)
# Environment: SWAP_DIR (default /var/tmp/zeroengine-swap; needs ~60 GB free),
# STEPS (default 3), ONLY (a row name to run alone). About 25 minutes on
# 2 cores and one NVMe drive. Needs python3.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
swap=${SWAP_DIR:-/var/tmp/zeroengine-swap}
steps=${STEPS:-3}
train=$build/runtime/zero-train
[ -x "$train" ] || { echo "run.sh: $train is not built (cmake --build $build)" >&2; exit 2; }
out=$here/results
mkdir -p "$out" "$swap"

# name | config | extra overrides
rows=(
  "1.2B resident|gpt-1.2b.json|"
  "1.2B bf16 master weights and optimizer states|gpt-1.2b.json|--set bf16.bf16_master_weights_and_grads=true --set bf16.bf16_optimizer_states=true"
  "1.2B parameters alone on NVMe|gpt-1.2b.json|--set zero_optimization.stage=3 --set zero_optimization.offload_param.device=nvme --set zero_optimization.offload_param.nvme_path=$swap --set aio.queue_depth=32"
  "1.2B optimizer on NVMe|gpt-1.2b.json|--set zero_optimization.sub_group_size=50000000 --set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path=$swap --set aio.queue_depth=32"
  "2.5B optimizer on NVMe|gpt-2.5b-nvme.json|--set zero_optimization.offload_optimizer.nvme_path=$swap"
  "2.5B optimizer and parameters on NVMe|gpt-2.5b-nvme.json|--set zero_optimization.stage=3 --set zero_optimization.offload_optimizer.nvme_path=$swap --set zero_optimization.offload_param.device=nvme --set zero_optimization.offload_param.nvme_path=$swap"
  "4.1B optimizer and parameters on NVMe|gpt-4b-nvme.json|--set zero_optimization.offload_optimizer.nvme_path=$swap --set zero_optimization.offload_param.nvme_path=$swap"
)
cd "$root"
for row in "${rows[@]}"; do
  IFS='|' read -r name config extra <<<"$row"
  [ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ] && continue
  tag=$(echo "$name" | tr ' .' '__')
  echo "== $name"
  echo "$name" >"$out/$tag.name"
  # shellcheck disable=SC2086
  "$train" --config "$here/$config" --steps "$steps" --metrics "$out/$tag.jsonl" $extra 2>&1 | tee "$out/$tag.log"
done
names=()
for row in "${rows[@]}"; do names+=("$(echo "${row%%|*}" | tr ' .' '__')"); done
python3 - "$out" "${names[@]}" <<'PY'
import json, pathlib, re, statistics, sys
out = pathlib.Path(sys.argv[1])
rows = []
# In the order of the rows above, those that have run.
for log in (out / (tag + ".log") for tag in sys.argv[2:]):
    if not log.exists():
        continue
    text = log.read_text()
    metrics = [json.loads(l) for l in (out / (log.stem + ".jsonl")).read_text().splitlines() if l.strip()]
    params = re.search(r"([\d.]+)M parameters", text)
    stage = re.search(r"ZeRO stage (\d)", text)
    peak = re.search(r"process RSS [^,]+, peak ([\d.]+ \w+)", text)
    last = metrics[-1]["memory"]
    host = last.get("host", {})
    model_state = sum(host.get(c, {}).get("peak", 0) for c in ("parameters", "gradients", "optimizer_state"))
    swap_buffers = host.get("swap_buffers", {}).get("peak", 0)
    nvme = sum(c.get("peak", 0) for k, c in last.get("nvme", {}).items() if k not in ("allocated", "reserved"))
    times = [m["step_time_s"] for m in metrics[1:]] or [metrics[0]["step_time_s"]]
    step_s = [m["time"]["step_s"] for m in metrics[1:]] or [metrics[0]["time"]["step_s"]]
    rows.append(((out / (log.stem + ".name")).read_text().strip(), stage.group(1) if stage else "?", params.group(1) if params else "?", peak.group(1) if peak else "?",
                 model_state / 2**30, swap_buffers / 2**30, nvme / 2**30, statistics.median(times),
                 statistics.median(step_s)))
lines = ["| run | ZeRO stage | params (M) | peak RSS | model states in memory (GiB) | swap buffers (GiB) | on NVMe (GiB) | step time (s) | of which optimizer step (s) |",
         "|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    lines.append("| %s | %s | %s | %s | %.2f | %.2f | %.2f | %.1f | %.1f |" % r)
(out / "table.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY

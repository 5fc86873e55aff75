#!/usr/bin/env python3
"""Collects bench/memory_scaling/run.sh's runs into CSV files.

For every (stage, ranks, tensor-parallel size, sequence parallelism, pipeline
stages, rank): each memory category's peak over the run, as
the tracking allocator recorded it in that rank's --metrics lines (each line
holds the step's peaks; the first step's include initialisation), the peak of
the total, and the process's peak RSS (rss_peak, VmHWM); beside each,
zero-estimate's planned bytes.
Prints the summary table and the worst planner error. Reads every generation
of run tags: stage{S}_ranks{N}[_tp{T}_sp{SP}[_pp{P}]], the missing axes 1, 0, 1.
usage: collect.py RUNS_DIR OUT_DIR
"""
import csv
import glob
import json
import os
import re
import sys

CATEGORIES = ["parameters", "gradients", "optimizer_state", "activations", "comm_buffers", "swap_buffers",
              "workspace"]


def measured(path):
    peaks = {c: 0 for c in CATEGORIES}
    peaks["total"] = 0
    rss = 0
    steps = []
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            steps.append((j.get("step_time_s", 0.0), j.get("tokens_per_s", 0.0)))
            host = j["memory"]["host"]
            for c in CATEGORIES:
                peaks[c] = max(peaks[c], host[c]["peak"])
            peaks["total"] = max(peaks["total"], host["allocated"]["peak"])
            rss = max(rss, j.get("rss_peak", j["rss"]))  # the peak (VmHWM); older runs: the end-of-step RSS
    # The step time: the fastest step after the first (which initialises),
    # and the global batch's tokens per second in it.
    fastest = min(steps[1:]) if len(steps) > 1 else (steps[0] if steps else (0.0, 0.0))
    peaks["step_time_s"], peaks["tokens_per_s"] = fastest
    return peaks, rss


def error_pct(m, p):
    if p == 0:
        return 0.0 if m == 0 else float("inf")
    return 100.0 * (m - p) / p


def write_layout_dat(path, summary):
    """One line per (layout, stage), for plot3d.gp: x position, label, stage,
    the largest rank's measured and planned MiB; layouts ordered by P, then T,
    a gap between layouts."""
    layouts = sorted({(s[1], s[9], s[12], s[15]) for s in summary}, key=lambda l: (l[3], l[1], l[2]))
    x = 0
    with open(path, "w") as f:
        f.write("# x label stage measured_MiB planned_MiB\n")
        for ranks, tensor, sp, pipeline in layouts:
            data = ranks // (tensor * pipeline)
            for s in sorted((s for s in summary if (s[1], s[9], s[12], s[15]) == (ranks, tensor, sp, pipeline)),
                            key=lambda s: s[0]):
                label = f"D{data} T{tensor} P{pipeline}{' SP' if sp else ''} z{s[0]}"
                f.write(f'{x} "{label}" {s[0]} {s[3] / 2**20:.2f} {s[4] / 2**20:.2f}\n')
                x += 1
            x += 1


def main():
    runs, out = sys.argv[1], sys.argv[2]
    rows, summary = [], []
    tags = sorted({re.sub(r"\.plan\.json$", "", os.path.basename(p)) for p in glob.glob(f"{runs}/*.plan.json")},
                  key=lambda t: tuple(int(x) for x in re.findall(r"\d+", t)))
    for tag in tags:
        numbers = [int(x) for x in re.findall(r"\d+", tag)]
        stage, ranks = numbers[:2]
        tensor = numbers[2] if len(numbers) > 2 else 1
        sp = numbers[3] if len(numbers) > 3 else 0
        pipeline = numbers[4] if len(numbers) > 4 else 1
        with open(f"{runs}/{tag}.plan.json") as f:
            plan = json.load(f)
        worst = (0.0, "")
        worst_total = (0.0, 0)
        best_rank = None
        for r in range(ranks):
            got, rss = measured(f"{runs}/{tag}.rank{r}.jsonl")
            planned = dict(plan["ranks"][r]["peak"]["host"])
            planned["total"] = plan["ranks"][r]["total"]["host"]
            for c in CATEGORIES + ["total"]:
                e = error_pct(got[c], planned[c])
                rows.append([stage, ranks, tensor, sp, pipeline, r, c, got[c], planned[c], f"{e:.3f}"])
                if abs(e) > abs(worst[0]):
                    worst = (e, f"rank {r} {c}")
            e = error_pct(got["total"], planned["total"])
            if abs(e) > abs(worst_total[0]):
                worst_total = (e, r)
            rows.append([stage, ranks, tensor, sp, pipeline, r, "rss", rss, "", ""])
            if best_rank is None or got["total"] > best_rank[1]:
                best_rank = (r, got["total"], planned["total"], rss, got["activations"], planned["activations"],
                             got["step_time_s"], got["tokens_per_s"])
        r, m, p, rss, act, act_plan, step_s, tok_s = best_rank
        summary.append([stage, ranks, r, m, p, f"{error_pct(m, p):.3f}", rss, f"{worst[0]:.3f}", worst[1], tensor,
                        act, act_plan, sp, f"{step_s:.3f}", f"{tok_s:.0f}", pipeline, plan.get("max_rank", ""),
                        f"{worst_total[0]:.3f}", worst_total[1]])

    with open(f"{out}/memory_scaling.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["stage", "ranks", "tensor", "sp", "pipeline", "rank", "category", "measured_bytes",
                    "planned_bytes", "error_pct"])
        w.writerows(rows)
    with open(f"{out}/summary.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["stage", "ranks", "max_rank", "measured_total_bytes", "planned_total_bytes", "total_error_pct",
                    "rss_bytes", "worst_category_error_pct", "worst_category", "tensor", "measured_activation_bytes",
                    "planned_activation_bytes", "sequence_parallel", "step_time_s", "tokens_per_s", "pipeline",
                    "planned_max_rank", "worst_rank_total_error_pct", "worst_rank"])
        w.writerows(summary)
    # One data block per stage for gnuplot (T = P = 1): ranks, measured MiB, planned MiB.
    with open(f"{out}/memory_scaling.dat", "w") as f:
        for stage in sorted({s[0] for s in summary}):
            f.write(f"# stage {stage}: ranks measured_MiB planned_MiB rss_MiB\n")
            for s in summary:
                if s[0] == stage and s[9] == 1 and s[12] == 0 and s[15] == 1:
                    f.write(f"{s[1]} {s[3] / 2**20:.2f} {s[4] / 2**20:.2f} {s[6] / 2**20:.2f}\n")
            f.write("\n\n")
    write_layout_dat(f"{out}/memory_3d.dat", summary)

    print(f"{'stage':>5} {'ranks':>5} {'T':>3} {'SP':>3} {'P':>3} | {'measured MiB':>12} {'planned MiB':>12} {'error':>8} |"
          f" {'activations MiB (planned)':>25} | {'step s':>7} {'tok/s':>7} | {'RSS MiB':>8} | worst category error"
          f" | worst rank total error")
    worst_all = 0.0
    for s in summary:
        print(f"{s[0]:>5} {s[1]:>5} {s[9]:>3} {s[12]:>3} {s[15]:>3} | {s[3] / 2**20:12.1f} {s[4] / 2**20:12.1f} {float(s[5]):7.2f}% |"
              f" {s[10] / 2**20:13.1f} ({s[11] / 2**20:8.1f}) | {float(s[13]):7.2f} {s[14]:>7} | {s[6] / 2**20:8.1f} |"
              f" {float(s[7]):.2f}% ({s[8] or '-'}) | {float(s[17]):.3f}% (rank {s[18]})")
        worst_all = max(worst_all, abs(float(s[17])))
    cat_worst = max((abs(float(s[7])) for s in summary), default=0.0)
    print(f"worst total error of any rank {worst_all:.3f}%, worst single-category error {cat_worst:.2f}%:"
          f" planner {'within' if worst_all <= 1 else 'NOT within'} 1% of measured on every rank")


if __name__ == "__main__":
    main()

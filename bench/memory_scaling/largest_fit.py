#!/usr/bin/env python3
"""The largest GPT that fits a per-rank memory budget, per 3D layout, by plan.

For every layout D x T x P of the world (T dividing 8, P in 1, 2, 4, 8) and
every ZeRO stage the engine allows there (0-2, and 3 at P = 1), bisects a
GPT-2-shaped model (bench/memory_scaling/gpt-fit.json: d_model = 64 n_head,
vocabulary 50304, sequence 256, micro-batch 1, bf16 + AdamW; 4 micro-batches
when P > 1) against zero-estimate's worst-rank planned host total:
  1. width, at GPT-2 small's aspect (n_layer = n_head, at least P): the
     largest n_head, a multiple of T, that fits;
  2. depth, at that width: the largest n_layer up to 2 n_head (GPT-2 XL's
     aspect, 48 layers for 25 heads) that fits.
The planned total grows with width and with depth, so both searches bisect.
A layout's best stage is the one whose fit has the most parameters (ties: the
smaller planned peak). Writes results-3d/largest_fit.csv, then (unless
--no-train) trains the largest fit of all for 3 steps with zero-train on the
world's ranks (mpirun, oversubscribed, one OpenMP thread each, every rank its
own --metrics file) and writes results-3d/largest_trained.csv: each rank's
measured peak tracked bytes and RSS beside its planned total. Before training
it checks that the ranks' planned totals plus an RSS allowance fit the
machine's available memory, and refuses otherwise (--force overrides).
usage: largest_fit.py [--build DIR] [--world 8] [--budget-gib 2.5] [--no-train] [--force]
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CONFIG = os.path.join(HERE, "gpt-fit.json")
OUT = os.path.join(HERE, "results-3d")
POWERS = [1, 2, 4, 8]
# RSS above the tracked total per rank (MPI, oneDNN, code, allocator free
# lists): 180-300 MiB in the memory-scaling sweeps, 208 MiB in the trained
# 1.1B run; part of it is pages the ranks share, so this errs high.
RSS_ALLOWANCE_BYTES = 256 * 2**20
VOCAB, SEQ_LEN = 50304, 256  # gpt-fit.json's


def gpt_parameters(n_layer, d_model):
    """The whole model's parameters (the tied token table once): token and
    position tables, per block two layer norms, QKV, projection and the MLP
    (12 d^2 + 13 d), the final layer norm; checked against zero-estimate's
    JSON num_parameters (the whole model's) on every plan."""
    return VOCAB * d_model + SEQ_LEN * d_model + n_layer * (12 * d_model**2 + 13 * d_model) + 2 * d_model


def layouts(world):
    """(D, T, P) with T and P powers of two up to 8 whose product divides world."""
    return [(world // (t * p), t, p) for p in POWERS for t in POWERS if world % (t * p) == 0]


def run_args(n_head, n_layer, t, p, stage):
    return ["--set", f"model.n_head={n_head}", "--set", f"model.d_model={64 * n_head}",
            "--set", f"model.n_layer={n_layer}", "--set", f"zero_optimization.stage={stage}",
            "--set", f"tensor_parallel.autotp_size={t}", "--set", f"pipeline.stages={p}",
            "--set", f"gradient_accumulation_steps={4 if p > 1 else 1}"]


class Planner:
    """zero-estimate --json, cached by run."""

    def __init__(self, build, world):
        self.binary = os.path.join(build, "runtime", "zero-estimate")
        self.world = world
        self.cache = {}
        self.calls = 0

    def plan(self, n_head, n_layer, t, p, stage):
        key = (n_head, n_layer, t, p, stage)
        if key not in self.cache:
            self.calls += 1
            cmd = [self.binary, "--config", CONFIG, *run_args(n_head, n_layer, t, p, stage),
                   "--world", str(self.world), "--json"]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"largest_fit.py: zero-estimate failed ({' '.join(cmd)}):\n{done.stderr}")
            self.cache[key] = json.loads(done.stdout)
            if self.cache[key]["num_parameters"] != gpt_parameters(n_layer, 64 * n_head):
                sys.exit(f"largest_fit.py: the parameter formula disagrees with zero-estimate for {key}:"
                         f" {gpt_parameters(n_layer, 64 * n_head)} against {self.cache[key]['num_parameters']}")
        return self.cache[key]

    def worst_rank_bytes(self, *run):
        return max(r["total"]["host"] for r in self.plan(*run)["ranks"])


def largest_true(lo, hi, fits):
    """The largest x in [lo, hi] with fits(x), fits monotone decreasing; lo - 1 if none."""
    if not fits(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def fit(planner, t, p, stage, budget):
    """The largest GPT-2-shaped (n_head, n_layer) under budget, or None."""
    def fits(n_head, n_layer):
        return planner.worst_rank_bytes(n_head, n_layer, t, p, stage) <= budget

    # 1. width at n_layer = n_head (at least P): n_head = k T, k up to 256 / T.
    k = largest_true(1, 256 // t, lambda k: fits(k * t, max(k * t, p)))
    if k < 1:
        return None
    n_head = k * t
    # 2. depth at that width, up to GPT-2 XL's aspect.
    n_layer = largest_true(max(n_head, p), max(2 * n_head, p), lambda n: fits(n_head, n))
    plan = planner.plan(n_head, n_layer, t, p, stage)
    return {"n_head": n_head, "n_layer": n_layer, "d_model": 64 * n_head,
            "parameters": gpt_parameters(n_layer, 64 * n_head),
            "planned_worst_rank_bytes": max(r["total"]["host"] for r in plan["ranks"]),
            "planned_max_rank": plan["max_rank"]}


def search(planner, world, budget):
    table = []
    for d, t, p in layouts(world):
        best = None
        for stage in ([0, 1, 2, 3] if p == 1 else [0, 1, 2]):
            got = fit(planner, t, p, stage, budget)
            print(f"  D{d} T{t} P{p} stage {stage}: " +
                  (f"n_layer {got['n_layer']} d_model {got['d_model']} {got['parameters'] / 1e6:.1f}M,"
                   f" planned {got['planned_worst_rank_bytes'] / 2**30:.3f} GiB" if got else "nothing fits"),
                  flush=True)
            if got and (best is None or (got["parameters"], -got["planned_worst_rank_bytes"]) >
                        (best["parameters"], -best["planned_worst_rank_bytes"])):
                best = dict(got, stage=stage)
        if best:
            table.append(dict(best, data=d, tensor=t, pipeline=p))
    return table


def mem_available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def measured_peaks(path):
    """Peak tracked total, per-category peaks and the largest RSS over a rank's --metrics lines."""
    total, rss, cats = 0, 0, {}
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            host = j["memory"]["host"]
            total = max(total, host["allocated"]["peak"])
            for c, v in host.items():
                if c not in ("allocated", "reserved"):
                    cats[c] = max(cats.get(c, 0), v["peak"])
            rss = max(rss, j["rss"])
    return total, cats, rss


def train(build, world, best, force):
    t, p, stage = best["tensor"], best["pipeline"], best["stage"]
    args = run_args(best["n_head"], best["n_layer"], t, p, stage)
    runs = os.path.join(OUT, "largest")
    os.makedirs(runs, exist_ok=True)
    for name in os.listdir(runs):
        os.remove(os.path.join(runs, name))
    plan_path = os.path.join(runs, "plan.json")
    with open(plan_path, "w") as f:
        subprocess.run([os.path.join(build, "runtime", "zero-estimate"), "--config", CONFIG, *args,
                        "--world", str(world), "--json"], stdout=f, check=True)
    with open(plan_path) as f:
        plan = json.load(f)
    need = sum(r["total"]["host"] for r in plan["ranks"]) + world * RSS_ALLOWANCE_BYTES
    have = mem_available_bytes()
    print(f"== training D{best['data']} T{t} P{p} stage {stage}, n_layer {best['n_layer']} d_model"
          f" {best['d_model']} ({best['parameters'] / 1e6:.1f}M) on {world} ranks: planned"
          f" {need / 2**30:.2f} GiB with {RSS_ALLOWANCE_BYTES >> 20} MiB RSS per rank, {have / 2**30:.2f} GiB"
          " available", flush=True)
    if need > have and not force:
        sys.exit("largest_fit.py: the ranks would not fit this machine's memory; --force to run anyway")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(world), "-x", "OMP_NUM_THREADS=1",
           os.path.join(build, "runtime", "zero-train"), "--config", CONFIG, *args, "--steps", "3",
           "--metrics", os.path.join(runs, "rank{rank}.jsonl")]
    start = time.time()
    with open(os.path.join(runs, "train.log"), "w") as log:
        done = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    print(f"   {time.time() - start:.0f} s, exit {done.returncode}; command: {' '.join(cmd)}")
    if done.returncode != 0:
        sys.exit(f"largest_fit.py: zero-train failed, see {runs}/train.log")
    rows, worst = [], (0.0, None, None)
    for r in range(world):
        total, cats, rss = measured_peaks(os.path.join(runs, f"rank{r}.jsonl"))
        planned = plan["ranks"][r]["total"]["host"]
        err = 100.0 * (total - planned) / planned
        cat_errs = {c: (cats[c], plan["ranks"][r]["peak"]["host"][c]) for c in cats}
        off = [f"{c} {m - pl:+d}" for c, (m, pl) in cat_errs.items() if m != pl]
        rows.append([best["data"], t, p, stage, best["n_layer"], best["d_model"], best["parameters"], r, total,
                     planned, f"{err:.3f}", rss, "; ".join(off)])
        if abs(err) >= abs(worst[0]):
            worst = (err, r, "; ".join(off))
        print(f"   rank {r}: measured {total / 2**20:.1f} MiB, planned {planned / 2**20:.1f} MiB ({err:+.3f}%),"
              f" RSS {rss / 2**20:.1f} MiB; categories off (bytes): {'; '.join(off) or 'none'}")
    with open(os.path.join(OUT, "largest_trained.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["data", "tensor", "pipeline", "stage", "n_layer", "d_model", "parameters", "rank",
                    "measured_total_bytes", "planned_total_bytes", "error_pct", "rss_bytes",
                    "categories_off_bytes"])
        w.writerows(rows)
    print(f"   worst rank error {worst[0]:+.3f}% (rank {worst[1]}); wrote {OUT}/largest_trained.csv")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--budget-gib", type=float, default=2.5)
    ap.add_argument("--no-train", action="store_true")
    ap.add_argument("--force", action="store_true", help="train even if the plan exceeds available memory")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    for b in ("zero-estimate", "zero-train"):
        if not os.access(os.path.join(build, "runtime", b), os.X_OK):
            sys.exit(f"largest_fit.py: {build}/runtime/{b} is not built (cmake --build {build})")
    budget = int(a.budget_gib * 2**30)
    os.makedirs(OUT, exist_ok=True)
    planner = Planner(build, a.world)
    start = time.time()
    table = search(planner, a.world, budget)
    print(f"== {planner.calls} plans in {time.time() - start:.1f} s")
    with open(os.path.join(OUT, "largest_fit.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["data", "tensor", "pipeline", "stage", "n_layer", "n_head", "d_model", "parameters",
                    "planned_worst_rank_bytes", "planned_max_rank", "budget_bytes"])
        for row in table:
            w.writerow([row["data"], row["tensor"], row["pipeline"], row["stage"], row["n_layer"], row["n_head"],
                        row["d_model"], row["parameters"], row["planned_worst_rank_bytes"], row["planned_max_rank"],
                        budget])
    print(f"{'layout':>10} {'stage':>5} {'n_layer':>7} {'d_model':>7} {'params M':>9} {'planned GiB':>11}")
    for row in table:
        print(f"{'D%d T%d P%d' % (row['data'], row['tensor'], row['pipeline']):>10} {row['stage']:>5}"
              f" {row['n_layer']:>7} {row['d_model']:>7} {row['parameters'] / 1e6:9.1f}"
              f" {row['planned_worst_rank_bytes'] / 2**30:11.3f}")
    print(f"== wrote {OUT}/largest_fit.csv")
    if not a.no_train and table:
        train(build, a.world, max(table, key=lambda r: (r["parameters"], -r["planned_worst_rank_bytes"])), a.force)


if __name__ == "__main__":
    main()

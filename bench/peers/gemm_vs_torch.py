#!/usr/bin/env python3
"""Every GEMM of a GPT-2 124M training step, ZeroEngine against PyTorch, in one run.

For each Linear shape of GPT-2 124M at 256 tokens (micro-batch 4 x seq 64) and
each of its three GEMMs -- forward y = x W^T, data gradient dX = dY W, weight
gradient dW += dY^T X -- this alternates rounds of ZeroEngine's
`BM_Gemm/<shape>/<dtype>/<kind>` (build/bench/gpt_step_bench, run as a child
process) with PyTorch's matmuls of the same shapes, dtypes, layouts and thread
count in this process, and prints the medians over the rounds as a Markdown
table: GFLOP/s of each, their ratio, and the arithmetic peak the benchmark
measures beside each GEMM (bench/fma_peak.h).

bf16 is run as the engine runs a bf16 model: bf16 activations, weights and
gradients, fp32 accumulation. The weight gradient accumulates into dW in both.

Needs a Python with torch (not a project dependency; for example
`python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch`):
    /tmp/tv/bin/python bench/peers/gemm_vs_torch.py --bench build/bench/gpt_step_bench
"""
import argparse
import json
import os
import statistics
import subprocess
import time

import torch

TOKENS = 256
SHAPES = [("qkv", 2304, 768), ("attn_proj", 768, 768), ("fc", 3072, 768), ("fc_proj", 768, 3072),
          ("lm_head", 50304, 768)]
KINDS = ["fwd", "dgrad", "wgrad"]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def torch_rate(out, inn, dtype, kind, min_time):
    x = torch.full((TOKENS, inn), 0.01, dtype=dtype)
    w = torch.full((out, inn), 0.02, dtype=dtype)
    dy = torch.full((TOKENS, out), 0.001, dtype=dtype)
    y = torch.empty((TOKENS, out), dtype=dtype)
    dx = torch.empty((TOKENS, inn), dtype=dtype)
    dw = torch.zeros((out, inn), dtype=dtype)
    ops = {"fwd": lambda: torch.mm(x, w.t(), out=y),
           "dgrad": lambda: torch.mm(dy, w, out=dx),
           "wgrad": lambda: dw.addmm_(dy.t(), x)}
    op = ops[kind]
    op()
    n, t0 = 0, time.perf_counter()
    while True:
        op()
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time:
            return 2.0 * TOKENS * inn * out * n / elapsed / 1e9


def ours(bench, min_time, threads):
    # Google Benchmark 1.7 (Debian 12) takes the minimum time as a bare number of seconds.
    out = subprocess.run([bench, "--benchmark_filter=BM_Gemm/.*/.*/", "--benchmark_format=json",
                          f"--benchmark_min_time={min_time}"], check=True, capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    rates = {}
    for b in json.loads(out.stdout)["benchmarks"]:
        _, shape, dt, kind = b["name"].split("/")
        rates[(shape, dt, kind)] = (b["GFLOP/s"], b.get("peak_GFLOP/s", 0.0))
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default="build/bench/gpt_step_bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min_time", type=float, default=0.3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ze, pt, peak = {}, {}, {}
    for r in range(args.rounds):
        for key, (rate, pk) in ours(args.bench, args.min_time, args.threads).items():
            ze.setdefault(key, []).append(rate)
            peak.setdefault(key, []).append(pk)
        for name, out, inn in SHAPES:
            for dt, tdt in DTYPES.items():
                for kind in KINDS:
                    pt.setdefault((name, dt, kind), []).append(torch_rate(out, inn, tdt, kind, args.min_time))
    print(f"torch {torch.__version__}, {args.threads} threads, {args.rounds} interleaved rounds, medians; "
          f"GFLOP/s (ratio to the arithmetic peak measured beside it)\n")
    for dt in DTYPES:
        print(f"| {dt} | GEMM | ZeroEngine | PyTorch | ZeroEngine / PyTorch |")
        print("| --- | --- | --- | --- | --- |")
        worst = None
        for name, out, inn in SHAPES:
            for kind in KINDS:
                key = (name, dt, kind)
                z, p, k = (statistics.median(v[key]) for v in (ze, pt, peak))
                ratio = z / p
                worst = ratio if worst is None else min(worst, ratio)
                peak_note = (lambda v: f" ({v / k:.2f})") if k > 0 else (lambda v: "")
                print(f"| {name} [{out}x{inn}] | {kind} | {z:.0f}{peak_note(z)} | {p:.0f}{peak_note(p)} | "
                      f"**{ratio:.2f}** |")
        print(f"\nworst {dt} ratio: {worst:.2f}\n")


if __name__ == "__main__":
    main()

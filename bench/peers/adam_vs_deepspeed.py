#!/usr/bin/env python3
"""CPU AdamW: ZeroEngine against DeepSpeed's DeepSpeedCPUAdam, step by step.

Starts build/bench/adam_bench --step_server (our fp32 AdamW kernel and the
read-4/write-3 bandwidth ceiling `adam_streams`, which reads p, g, m, v and
writes p, m, v like an Adam step with one multiply in place of Adam's
arithmetic, each over 64 Mi fp32 elements) and alternates single steps:
ours, DeepSpeedCPUAdam over the same number of fp32 parameters with fp32
gradients in this process, the ceiling; again and again. Each program's steps
run on the same thread count, never at the same time (idle OpenMP threads
sleep: OMP_WAIT_POLICY=PASSIVE), and a shared host's
noise falls on all three alike. Prints the median G params/s and GB/s (at 28
bytes per parameter) of each, each over the ceiling, and the median and
quartiles of the per-triple ratio ZeroEngine / DeepSpeed.

Needs a Python with torch and deepspeed (not project dependencies; DeepSpeed
JIT-compiles its cpu_adam op on first use, about a minute):
    /tmp/tv/bin/python bench/peers/adam_vs_deepspeed.py --bench build/bench/adam_bench
"""
import argparse
import os
import statistics
import subprocess
import time

NUMEL = 64 << 20  # adam_bench's kNumel
BYTES_PER_PARAM = 28.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default="build/bench/adam_bench")
    ap.add_argument("--steps", type=int, default=40, help="alternations (one step of each per alternation)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # DeepSpeed's OpenMP, here and in its op
    # Idle OpenMP threads sleep instead of spinning: one program's threads
    # spinning after its step would take cores from the other's next step.
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    import torch
    import deepspeed
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    torch.set_num_threads(args.threads)

    server = subprocess.Popen([args.bench, "--step_server", "--threads", str(args.threads)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ours(word):
        server.stdin.write(word + "\n")
        server.stdin.flush()
        return float(server.stdout.readline())

    p = torch.nn.Parameter(torch.full((NUMEL,), 0.5, dtype=torch.float32))
    p.grad = torch.full((NUMEL,), 1e-3, dtype=torch.float32)
    opt = DeepSpeedCPUAdam([p], lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, adamw_mode=True)

    def theirs():
        t0 = time.perf_counter()
        opt.step()
        return time.perf_counter() - t0

    for _ in range(2):  # warm: first touch of every array and state, thread pools
        ours("adamw"), theirs(), ours("ceiling")
    ze, ds, ceil = [], [], []
    for _ in range(args.steps):
        ze.append(ours("adamw"))
        ds.append(theirs())
        ceil.append(ours("ceiling"))
    server.stdin.close()
    server.wait()

    gbps = lambda s: BYTES_PER_PARAM * NUMEL / s / 1e9
    c = gbps(statistics.median(ceil))
    print(f"deepspeed {deepspeed.__version__}, torch {torch.__version__}, {args.threads} threads, "
          f"{NUMEL} fp32 elements, {args.steps} alternating steps each, medians\n")
    print("| AdamW step | G params/s | GB/s (28 B/param) | over the read-4/write-3 ceiling |")
    print("| --- | --- | --- | --- |")
    for name, times in (("ZeroEngine", ze), ("DeepSpeedCPUAdam", ds), ("ceiling (adam_streams)", ceil)):
        v = gbps(statistics.median(times))
        print(f"| {name} | {v / BYTES_PER_PARAM:.2f} | {v:.1f} | {v / c:.2f} |")
    paired = sorted(d / z for z, d in zip(ze, ds))  # time ratio = speed ratio ours / theirs
    q = statistics.quantiles(paired, n=4)
    print(f"\nZeroEngine / DeepSpeed, step by step: median {statistics.median(paired):.2f}, "
          f"quartiles {q[0]:.2f}-{q[2]:.2f}, range {paired[0]:.2f}-{paired[-1]:.2f}")


if __name__ == "__main__":
    main()

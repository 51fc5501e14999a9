#!/usr/bin/python3
"""The machine's peak matmul FLOP/s, the denominator of MFU in
bench/gpt/run_gpt_bench.sh: the best of --repeats timings of an n x n x n
matmul (2 n^3 FLOPs) in float32 and in bfloat16, through the same LibTorch
library the C++ example links (Debian's 1.13: fp32 goes to OpenBLAS, bf16 to
oneDNN; for the bench's HF table, run with HF_PYTHON: the newest torch, whose
LibTorch CPP_NEW_BUILD links). Threads: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS as exported (the
bench exports all cores). Prints "peak fp32_gflops=... bf16_gflops=...".
"""

import argparse
import os
import time

import torch


def best_gflops(n, dtype, repeats):
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.matmul(a, b)  # warm-up: thread pools, oneDNN's kernel generation
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    fp32 = best_gflops(args.n, torch.float32, args.repeats)
    bf16 = best_gflops(args.n, torch.bfloat16, args.repeats)
    print("peak fp32_gflops=%.1f bf16_gflops=%.1f n=%d threads=%d OPENBLAS_NUM_THREADS=%s"
          % (fp32, bf16, args.n, torch.get_num_threads(), os.environ.get("OPENBLAS_NUM_THREADS")))


if __name__ == "__main__":
    main()

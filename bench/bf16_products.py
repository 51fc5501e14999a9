"""How fast this CPU's LibTorch runs bf16 matrix products against fp32 ones.

Products of GPT-2 small's shapes (batch x tokens = 1024 rows; 768 -> 2304,
768 -> 3072, 3072 -> 768), forward and the two backward products, timed in
fp32 and in bf16, the latter twice where the CPU has AVX-512: through
oneDNN (ATen's choice on a CPU with AVX-512 BW/VL/DQ) and through ATen's
own gemm (its choice on a CPU without them, such as an AVX2 EPYC; forced
here with torch.backends.mkldnn.flags(enabled=False)). Prints GFLOP/s and
the bf16/fp32 ratios: the cost docs/mixed-precision.md ("bf16 without bf16
hardware") tabulates per CPU kind. Run it with the interpreter of the
LibTorch to measure (Debian's /usr/bin/python3 has torch 1.13; the project's
venv has the newest), e.g.
    OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 /usr/bin/python3 bench/bf16_products.py
"""
import argparse
import time

import torch

SHAPES = [(1024, 768, 2304), (1024, 768, 3072), (1024, 3072, 768)]


def seconds_per_step(dtype, repeats):
    torch.manual_seed(0)
    operands = [(torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype),
                 torch.randn(m, n).to(dtype)) for m, k, n in SHAPES]

    def step():
        for a, b, g in operands:
            a @ b          # forward
            g @ b.t()      # input gradient
            a.t() @ g      # weight gradient

    step()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    flops = sum(3 * 2 * m * k * n for m, k, n in SHAPES)
    fp32 = seconds_per_step(torch.float32, args.repeats)
    rows = [("fp32", fp32)]
    with torch.backends.mkldnn.flags(enabled=True):
        rows.append(("bf16, ATen's choice", seconds_per_step(torch.bfloat16, args.repeats)))
    with torch.backends.mkldnn.flags(enabled=False):
        rows.append(("bf16, ATen's own gemm", seconds_per_step(torch.bfloat16, args.repeats)))
    print(f"torch {torch.__version__}, {args.threads} threads, "
          f"{torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, 'cpu') else 'n/a'}")
    for name, seconds in rows:
        print(f"{name:24s} {flops / seconds / 1e9:8.1f} GFLOP/s   "
              f"time / fp32's {seconds / fp32:6.2f}")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Communication-heavy bench workload: 6 x (Linear(1024,1024) + ReLU).

Batch 32 per process of synthetic data (fixed random inputs and targets),
MSE loss, SGD lr 0.01. Runs as one plain process, or as a DDP rank on gloo
when RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are set
(bench/python/launch.sh N starts N ranks). The model has 6.3 M parameters
(25.2 MB of fp32 gradients per step), so on 2 CPU ranks the all-reduce is a
large share of the step.

Prints, on rank 0, the median and mean ms per training step over --steps
timed steps after --warmup untimed ones. Each timed step ends with the
optimizer step; under DDP the timed region starts after a barrier.

Threads per process: OMP_NUM_THREADS if set, else cores / local ranks.
"""

import argparse
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (sets thread counts before torch loads)
from _common import torch, dist  # noqa: E402
import torch.nn as nn  # noqa: E402


def make_model(layers=6, width=1024):
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*mods)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100, help="timed steps")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32, help="per process")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rank, world = _common.init()
    torch.manual_seed(args.seed)
    model = make_model()
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    g = torch.Generator()
    g.manual_seed(args.seed + 1 + rank)
    x = torch.randn(args.batch_size, 1024, generator=g)
    y = torch.randn(args.batch_size, 1024, generator=g)
    nparams = sum(p.numel() for p in model.parameters())

    if rank == 0:
        print("linear_ddp: %s; %d parameters, batch %d per process, %d warm-up + %d timed steps"
              % (_common.describe(), nparams, args.batch_size, args.warmup, args.steps), flush=True)

    def step():
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    if world > 1:
        dist.barrier()
    times = []
    t_all = time.perf_counter()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append((time.perf_counter() - t0) * 1000.0)
    if world > 1:
        dist.barrier()
    total = (time.perf_counter() - t_all) * 1000.0
    times.sort()
    median = times[len(times) // 2] if len(times) % 2 else 0.5 * (times[len(times) // 2 - 1] + times[len(times) // 2])
    if rank == 0:
        print("linear_ddp: world %d, %.1f ms/step median, %.1f ms/step mean (min %.1f, max %.1f), final loss %.5f"
              % (world, median, total / args.steps, times[0], times[-1], loss.item()), flush=True)
    _common.finish()


if __name__ == "__main__":
    main()

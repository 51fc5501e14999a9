#!/usr/bin/python3
"""Where PyTorch's Python DDP spends a training step (the Python side of
bench/linear/mnist_profile and linear_bench's phase figures).

    bench/python/launch.sh 2 bench/linear/ddp_phase_profile.py mnist
    bench/python/launch.sh 2 bench/linear/ddp_phase_profile.py linear
    /usr/bin/python3 bench/linear/ddp_phase_profile.py mnist      (1 process)

The same models, data, optimizers and batch sizes as
bench/python/mnist_reference.py and bench/python/linear_ddp.py (imported from
there). Prints on rank 0 one line

    result workload=mnist mode=ddp world=2 threads=1 steps=63 ms_per_step=...
      data_ms=... fwd_ms=... bwd_ms=... opt_ms=...

mnist: means over the last of --epochs epochs; linear: medians over --steps
timed steps after --warmup. fwd_ms: zero_grad, forward and loss; bwd_ms:
loss.backward() (under DDP this includes waiting for the gradient
all-reduce, which DDP finishes at the end of backward); opt_ms:
optimizer.step(). Used for docs/performance.md; not part of CI.
"""

import argparse
import os
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import _common  # noqa: E402  (thread settings before torch loads)
from _common import torch, dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import mnist_reference  # noqa: E402
import linear_ddp  # noqa: E402


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def report(workload, world, steps, phases, reduce):
    fields = " ".join("%s_ms=%.3f" % (k, reduce(v)) for k, v in phases.items() if k != "step")
    print("result workload=%s mode=%s world=%d threads=%d steps=%d ms_per_step=%.3f %s"
          % (workload, "ddp" if world > 1 else "python", world, torch.get_num_threads(), steps,
             reduce(phases["step"]), fields), flush=True)


def mnist(args, rank, world):
    torch.manual_seed(args.seed)
    train_x, train_y = mnist_reference.load(args.data, "train")
    model = mnist_reference.BasicNet()
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    n = train_x.shape[0]
    if world > 1:
        sampler = torch.utils.data.distributed.DistributedSampler(
            range(n), num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    for epoch in range(1, args.epochs + 1):
        model.train()
        if world > 1:
            sampler.set_epoch(epoch)
            order = torch.tensor(list(iter(sampler)), dtype=torch.long)
            dist.barrier()
        else:
            g = torch.Generator()
            g.manual_seed(args.seed + epoch)
            order = torch.randperm(n, generator=g)
        phases = {k: [] for k in ("step", "data", "fwd", "bwd", "opt")}
        for i in range(0, order.numel(), 64):
            t0 = time.perf_counter()
            idx = order[i:i + 64]
            x, y = train_x[idx], train_y[idx]
            t1 = time.perf_counter()
            opt.zero_grad()
            loss = F.nll_loss(model(x), y)
            t2 = time.perf_counter()
            loss.backward()
            t3 = time.perf_counter()
            opt.step()
            t4 = time.perf_counter()
            for k, a, b in (("step", t0, t4), ("data", t0, t1), ("fwd", t1, t2), ("bwd", t2, t3),
                            ("opt", t3, t4)):
                phases[k].append((b - a) * 1e3)
    if rank == 0:
        report("mnist", world, len(phases["step"]), phases, lambda v: sum(v) / len(v))


def linear(args, rank, world):
    torch.manual_seed(args.seed)
    model = linear_ddp.make_model()
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator()
    g.manual_seed(args.seed + 1 + rank)
    x = torch.randn(32, 1024, generator=g)
    y = torch.randn(32, 1024, generator=g)
    phases = {k: [] for k in ("step", "fwd", "bwd", "opt")}
    for i in range(args.warmup + args.steps):
        if i == args.warmup and world > 1:
            dist.barrier()
        t1 = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        opt.step()
        t4 = time.perf_counter()
        if i >= args.warmup:
            for k, a, b in (("step", t1, t4), ("fwd", t1, t2), ("bwd", t2, t3), ("opt", t3, t4)):
                phases[k].append((b - a) * 1e3)
    if rank == 0:
        report("linear", world, args.steps, phases, median)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workload", choices=("mnist", "linear"))
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.dirname(HERE)), "data", "mnist"))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    if args.seed is None:
        args.seed = 42 if args.workload == "mnist" else 0
    rank, world = _common.init()
    (mnist if args.workload == "mnist" else linear)(args, rank, world)
    _common.finish()


if __name__ == "__main__":
    main()

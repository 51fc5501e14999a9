#!/usr/bin/env python3
"""examples/gpt's training run as a Python user would write it on the newest
PyTorch: Hugging Face transformers' GPT2LMHeadModel under Hugging Face
Accelerate, timed by bench/gpt/run_gpt_bench.sh beside the C++ program built
on the newest LibTorch (docs/gpt-performance.md).

Run it with the reference venv's python (scripts/install-reference-python.sh:
torch, transformers and accelerate from PyPI), never Debian's.

The same as examples/gpt and bench/gpt/gpt_twin.py where it can be:
  model     GPT2LMHeadModel(GPT2Config) with the preset's dims (gpt_twin's
            PRESETS), the vocab of the token files, dropout 0 (examples/gpt's
            --dropout default, which the bench keeps), layer_norm_epsilon
            1e-5, gelu_new, tied head; attn_implementation="sdpa"
            (transformers' default: torch's fused attention);
            use_cache=False (training needs no KV cache)
  data      gpt_twin's token-file reader and windows (imported, not copied);
            a DataLoader over the same epoch order (torch.randperm seeded
            --seed), sharded by accelerator.prepare: process r of W gets
            batch r of each W, i.e. the samples gpt_twin's rank r takes
  loss      the model's own loss (labels=...) with shift_labels = the
            window's targets, so every window predicts its T next tokens as
            on the other sides (labels alone would shift them again and
            drop the last target)
  optimizer AdamW (0.9, 0.999, 1e-8) with weight decay on the names that
            transformers' Trainer decays (get_parameter_names: all but
            LayerNorm and biases), clipping to 1.0 (accelerator.
            clip_grad_norm_), transformers' get_cosine_schedule_with_warmup
            stepped once per step as the Trainer does (not passed to
            prepare, which would step it once per process)
  bf16      Accelerator(mixed_precision="bf16"): autocast to bfloat16
  processes --num_processes 1: one process; N: this script re-runs itself
            under `python -m torch.distributed.run --standalone` and each
            rank's Accelerator(cpu=True) takes RANK/WORLD_SIZE from the
            environment: DistributedType.MULTI_CPU, DDP on gloo. (`accelerate
            launch --cpu --num_processes 2` is no use here: on CPU without
            an MPI hostfile it starts a single process.)

What is not the same: the initial weights. transformers initializes GPT-2
its own way (the same distributions: normal(0, 0.02), residual projections
scaled by 1/sqrt(2 L), but another order of draws), so the first step's loss
differs from the C++ program's, and the validation loss after training
agrees only within a tolerance, not bit for bit.

Threads per process: OMP_NUM_THREADS (torch.set_num_threads), as gpt_twin.
Prints on rank 0 one line per step (loss = mean over ranks, lr, grad norm,
seconds) and a final "result side=hf ..." line like gpt_twin's: tokens/s over
the steps after --skip (each timed end to end: data, forward, backward,
clipping, optimizer, the logged loss's mean over processes), eval_loss over
the first --max_eval_samples validation windows (after training, untimed).
"""

import argparse
import os
import sys
import time

import accelerate
import torch
import transformers
from accelerate import Accelerator
from torch.utils.data import DataLoader, Dataset
from transformers import GPT2Config, GPT2LMHeadModel, get_cosine_schedule_with_warmup
from transformers.trainer_pt_utils import get_parameter_names

sys.dont_write_bytecode = True  # no __pycache__ in the source tree for the import below
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_twin import PRESETS, Windows, read_tokens  # noqa: E402


class WindowDataset(Dataset):
    """Window i of the token file as (input_ids, targets)."""

    def __init__(self, windows):
        self.windows = windows

    def __len__(self):
        return self.windows.size

    def __getitem__(self, i):
        data, target = self.windows.batch([i])
        return data[0], target[0]


def run(args):
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    accelerator = Accelerator(cpu=True, mixed_precision="bf16" if args.bf16 else "no")
    world, rank = accelerator.num_processes, accelerator.process_index
    if world != args.num_processes:
        sys.exit("hf_gpt2_run: error: %d process(es) running, --num_processes %d"
                 % (world, args.num_processes))

    train_tokens, vocab = read_tokens(args.train)
    eval_tokens, eval_vocab = read_tokens(args.validation)
    if eval_vocab != vocab:
        sys.exit("hf_gpt2_run: error: the token files have vocab %d and %d" % (vocab, eval_vocab))
    dims = PRESETS[args.preset]
    block, batch = dims["n_positions"], args.batch_size
    train, evaluation = Windows(train_tokens, block), Windows(eval_tokens, block)
    if args.max_steps * batch * world > train.size:
        sys.exit("hf_gpt2_run: error: %d steps need more than one epoch" % args.max_steps)

    torch.manual_seed(args.seed)
    config = GPT2Config(vocab_size=vocab, **dims, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, layer_norm_epsilon=1e-5, use_cache=False,
                        bos_token_id=None, eos_token_id=None,  # GPT-2's 50256 is past this vocab
                        attn_implementation="sdpa")
    model = GPT2LMHeadModel(config)
    params = sum(p.numel() for p in model.parameters())
    # transformers' Trainer.get_decay_parameter_names
    decay_names = set(get_parameter_names(model, [torch.nn.LayerNorm],
                                          [r"bias", r"layernorm", r"rmsnorm",
                                           r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]))
    named = list(model.named_parameters())  # the tied head's weight once, as wte
    groups = [{"params": [p for n, p in named if n in decay_names], "weight_decay": args.weight_decay},
              {"params": [p for n, p in named if n not in decay_names], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, betas=(0.9, 0.999), eps=1e-8)
    scheduler = get_cosine_schedule_with_warmup(optimizer, args.warmup_steps, args.max_steps)
    order = torch.randperm(train.size, generator=torch.Generator().manual_seed(args.seed))
    loader = DataLoader(WindowDataset(train), batch_size=batch, sampler=order.tolist())
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    precision = "bf16" if args.bf16 else "fp32"
    if rank == 0:
        print("hf_gpt2_run: torch %s, transformers %s, accelerate %s, %d process(es) (%s), "
              "%d thread(s) per process (OMP_NUM_THREADS=%s OPENBLAS_NUM_THREADS=%s OMP_WAIT_POLICY=%s), "
              "%s, attention %s"
              % (torch.__version__, transformers.__version__, accelerate.__version__, world,
                 accelerator.distributed_type, torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS"),
                 os.environ.get("OPENBLAS_NUM_THREADS"), os.environ.get("OMP_WAIT_POLICY"), precision,
                 accelerator.unwrap_model(model).config._attn_implementation))
        print("hf_gpt2_run: preset %s: %d parameters, vocab %d, context %d, batch %d per process, "
              "%d steps" % (args.preset, params, vocab, block, batch, args.max_steps), flush=True)

    model.train()
    times = []
    batches = iter(loader)
    last = time.perf_counter()
    for step in range(args.max_steps):
        data, target = next(batches)
        loss = model(input_ids=data, labels=target, shift_labels=target).loss
        accelerator.backward(loss)
        norm = accelerator.clip_grad_norm_(model.parameters(), 1.0)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        mean_loss = accelerator.reduce(loss.detach(), reduction="mean").item()
        now = time.perf_counter()
        times.append(now - last)
        last = now
        if rank == 0:
            print("step %d: loss %.6f, lr %.3g, grad_norm %.4f, %.3f s"
                  % (step + 1, mean_loss, lr, norm.item(), times[-1]), flush=True)

    # Evaluation as gpt_twin's: the first max_eval_samples windows in order,
    # batches dealt to the ranks in turn, the mean of per-window losses.
    model.eval()
    net = accelerator.unwrap_model(model)
    count = min(evaluation.size, args.max_eval_samples or evaluation.size)
    total = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad(), accelerator.autocast():
        for i, start in enumerate(range(0, count, batch)):
            if i % world == rank:
                rows = list(range(start, min(start + batch, count)))
                data, target = (t.contiguous() for t in evaluation.batch(rows))
                loss = net(input_ids=data, labels=target, shift_labels=target).loss
                total += torch.tensor([loss.item() * len(rows), len(rows)], dtype=torch.float64)
    total = accelerator.reduce(total, reduction="sum")
    timed = times[args.skip:]
    if rank == 0:
        tokens_per_s = len(timed) * batch * block * world / sum(timed)
        print("result side=hf processes=%d precision=%s params=%d tokens_per_s=%.2f "
              "timed_steps=%d eval_loss=%.6f eval_samples=%d"
              % (world, precision, params, tokens_per_s, len(timed), (total[0] / total[1]).item(),
                 int(total[1].item())), flush=True)
    accelerator.wait_for_everyone()
    accelerator.end_training()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", required=True, help="token file of the train split")
    ap.add_argument("--validation", required=True, help="token file of the validation split")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small")
    ap.add_argument("--num_processes", type=int, default=1,
                    help="more than 1: ranks under torch.distributed.run (gpt_twin's --nproc)")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--max_steps", type=int, default=30)
    ap.add_argument("--skip", type=int, default=5, help="warm-up steps left out of tokens/s")
    ap.add_argument("--batch_size", type=int, default=16, help="per process")
    ap.add_argument("--learning_rate", type=float, default=1e-3)
    ap.add_argument("--weight_decay", type=float, default=0.1)
    ap.add_argument("--warmup_steps", type=int, default=10)
    ap.add_argument("--max_eval_samples", type=int, default=0, help="0: all windows")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    if args.num_processes < 1 or not 0 <= args.skip < args.max_steps:
        sys.exit("hf_gpt2_run: error: need --num_processes >= 1 and 0 <= --skip < --max_steps")
    if args.num_processes > 1 and "LOCAL_RANK" not in os.environ:
        # The ranks: torch.distributed.run on a free local port; it keeps the
        # OMP_NUM_THREADS the caller exported. (The flag is not gpt_twin's
        # --nproc because torch.distributed.run would take that for an
        # abbreviation of its own --nproc_per_node.)
        os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                  "--nproc_per_node", str(args.num_processes), os.path.abspath(__file__)]
                 + sys.argv[1:])
    run(args)


if __name__ == "__main__":
    main()

# The Python twin of examples/nlp: the logic of Hugging Face Accelerate's
# complete_nlp_example.py (Accelerator, prepare, backward,
# gather_for_metrics, save_state/load_state, a linear schedule with warm-up
# stepped by the prepared scheduler), with transformers and accelerate from
# PyPI, on the same model (all-MiniLM-L6-v2 with a new head), data (the TSV
# files scripts/fetch-brown-genre.sh writes), seed and hyper-parameters as
# the C++ program's defaults. Differences from the original, each because of
# what this machine has: the data comes from the TSV files instead of
# `datasets` (GLUE MRPC is not reachable here), the metric is computed from
# counts instead of `evaluate` (the same accuracy and binary F1), and the
# flags that bench/nlp/run_nlp_bench.sh passes the C++ program too
# (--max_train_samples, --max_eval_samples, --max_length, --batch_size,
# --learning_rate, --num_warmup_steps) are flags here as well.
#
# Run as the C++ program (1 or 2 processes):
#   python -m torch.distributed.run --nproc_per_node 2 bench/nlp/complete_nlp_example.py --cpu
import argparse
import csv
import os
import time

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import (AutoModelForSequenceClassification, AutoTokenizer,
                          get_linear_schedule_with_warmup, set_seed)

EVAL_BATCH_SIZE = 32


def read_tsv(path, max_samples):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    if max_samples:
        rows = rows[:max_samples]
    return [{"sentence": r.get("sentence1", r.get("sentence")), "label": int(r["label"])} for r in rows]


def get_dataloaders(accelerator, args, tokenizer):
    def encode(rows):
        out = []
        for row in rows:
            enc = tokenizer(row["sentence"], truncation=True, max_length=args.max_length)
            enc["labels"] = row["label"]
            out.append(enc)
        return out

    train = encode(read_tsv(args.train_file, args.max_train_samples))
    validation = encode(read_tsv(args.validation_file, args.max_eval_samples))

    def collate_fn(examples):
        pad_to_multiple_of = None if accelerator.mixed_precision == "no" else 8
        return tokenizer.pad(examples, padding="longest", pad_to_multiple_of=pad_to_multiple_of,
                             return_tensors="pt")

    train_dataloader = DataLoader(train, shuffle=True, collate_fn=collate_fn,
                                  batch_size=args.batch_size)
    eval_dataloader = DataLoader(validation, shuffle=False, collate_fn=collate_fn,
                                 batch_size=EVAL_BATCH_SIZE)
    return train_dataloader, eval_dataloader, len(validation)


def training_function(args):
    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    set_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    train_dataloader, eval_dataloader, eval_examples = get_dataloaders(accelerator, args, tokenizer)
    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=2)
    model = model.to(accelerator.device)
    optimizer = torch.optim.AdamW(params=model.parameters(), lr=args.learning_rate)
    gradient_accumulation_steps = args.gradient_accumulation_steps
    lr_scheduler = get_linear_schedule_with_warmup(
        optimizer=optimizer, num_warmup_steps=args.num_warmup_steps,
        num_training_steps=(len(train_dataloader) * args.num_epochs) // gradient_accumulation_steps)
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler)

    for epoch in range(args.num_epochs):
        model.train()
        samples = 0
        start = time.perf_counter()
        for step, batch in enumerate(train_dataloader):
            batch.to(accelerator.device)
            outputs = model(**batch)
            loss = outputs.loss / gradient_accumulation_steps
            accelerator.backward(loss)
            if step % gradient_accumulation_steps == 0:
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            samples += batch["labels"].shape[0]
        seconds = time.perf_counter() - start

        model.eval()
        tp = fp = fn = tn = 0
        for batch in eval_dataloader:
            batch.to(accelerator.device)
            with torch.no_grad():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            predictions, references = accelerator.gather_for_metrics((predictions, batch["labels"]))
            p, r = predictions.eq(1), references.eq(1)
            tp += int((p & r).sum())
            fp += int((p & ~r).sum())
            fn += int((~p & r).sum())
            tn += int((~p & ~r).sum())
        total = tp + fp + fn + tn
        assert total == eval_examples, (total, eval_examples)
        f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0
        accelerator.print(f"epoch {epoch}:", {"accuracy": (tp + tn) / total, "f1": f1})
        processes = accelerator.num_processes
        accelerator.print(f"epoch {epoch}: {total} validation examples; train "
                          f"{samples * processes} examples in {seconds:g} s, "
                          f"{samples * processes / seconds:g} samples/s")
    accelerator.end_training()


def main():
    parser = argparse.ArgumentParser(description="The Python twin of examples/nlp.")
    parser.add_argument("--mixed_precision", default=None, choices=["no", "fp16", "bf16"])
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--model", default="data/all-MiniLM-L6-v2")
    parser.add_argument("--train_file", default="data/brown-genre/train.tsv")
    parser.add_argument("--validation_file", default="data/brown-genre/validation.tsv")
    parser.add_argument("--num_epochs", type=int, default=3)
    parser.add_argument("--learning_rate", type=float, default=2e-5)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--gradient_accumulation_steps", type=int, default=1)
    parser.add_argument("--num_warmup_steps", type=int, default=100)
    parser.add_argument("--max_length", type=int, default=128)
    parser.add_argument("--max_train_samples", type=int, default=0)
    parser.add_argument("--max_eval_samples", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    training_function(args)


if __name__ == "__main__":
    main()

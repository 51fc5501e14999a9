"""When transformers' Trainer logs, evaluates and saves, and how its
predict() pads predictions of varying length, for
tests/trainer/trainer_flow_test.cpp.

  python trainer_flow_reference.py flow OUT.txt
  python trainer_flow_reference.py padding IN.safetensors OUT.safetensors

Run under $ACCELERATE_REFERENCE_PYTHON (transformers and torch); CPU only.
Each case trains a one-layer regression model on random data; the script
writes the case's settings, then the global steps at which a training loss
was logged, an evaluation ran and a checkpoint was saved. The C++ test runs
the same settings through accelerate::Trainer and compares the steps.
"""
import os
import sys
import tempfile

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

try:  # transformers' Trainer needs it; an older reference venv lacks it
    import accelerate  # noqa: F401
except ImportError:
    print("the reference lacks accelerate: run scripts/install-reference-python.sh", file=sys.stderr)
    sys.exit(77)

# samples, batch, accumulation, max_steps, epochs, logging_strategy,
# logging_steps, logging_first_step, eval_strategy, eval_steps (0: unset),
# save_strategy, save_steps
CASES = [
    (40, 4, 1, -1, 2, "steps", 3, 0, "steps", 4, "steps", 6),
    (40, 4, 1, 13, 3, "epoch", 5, 1, "epoch", 0, "epoch", 5),
    (30, 3, 3, -1, 2.5, "no", 5, 1, "steps", 0, "no", 5),
    (40, 4, 1, 12, 3, "steps", 4, 0, "steps", 4, "steps", 4),
    (24, 4, 2, 10, 3, "steps", 4, 1, "no", 0, "steps", 5),
    (24, 4, 1, -1, 2, "epoch", 2, 0, "steps", 5, "steps", 7),
]


class Regression(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 1)

    def forward(self, x, labels):
        return {"loss": torch.nn.functional.mse_loss(self.fc(x), labels)}


class Recorder(TrainerCallback):
    def __init__(self):
        self.logs, self.evaluations, self.saves = [], [], []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.logs.append(state.global_step)

    def on_evaluate(self, args, state, control, **kwargs):
        self.evaluations.append(state.global_step)

    def on_save(self, args, state, control, **kwargs):
        self.saves.append(state.global_step)


def data(samples, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 3, generator=gen)
    y = x.cos().sum(1, keepdim=True)
    return [{"x": x[i], "labels": y[i]} for i in range(samples)]


def run(case, out):
    (samples, batch, accumulation, max_steps, epochs, logging_strategy, logging_steps, first,
     eval_strategy, eval_steps, save_strategy, save_steps) = case
    with tempfile.TemporaryDirectory() as folder:
        args = TrainingArguments(
            output_dir=folder, use_cpu=True, report_to="none", disable_tqdm=True,
            per_device_train_batch_size=batch, per_device_eval_batch_size=batch,
            gradient_accumulation_steps=accumulation, max_steps=max_steps,
            num_train_epochs=epochs, logging_strategy=logging_strategy,
            logging_steps=logging_steps, logging_first_step=bool(first),
            eval_strategy=eval_strategy, eval_steps=eval_steps or None,
            save_strategy=save_strategy, save_steps=save_steps, save_only_model=True,
            learning_rate=0.01, seed=1)
        recorder = Recorder()
        trainer = Trainer(model=Regression(), args=args, train_dataset=data(samples, 1),
                          eval_dataset=data(8, 2), callbacks=[recorder])
        trainer.train()
    out.write("case " + " ".join(str(v) for v in case) + "\n")
    for name, steps in (("log", recorder.logs), ("evaluate", recorder.evaluations),
                        ("save", recorder.saves)):
        out.write(name + "".join(f" {s}" for s in steps) + "\n")


def flow(out_path):
    with open(out_path, "w") as out:
        for case in CASES:
            run(case, out)


class Tagger(torch.nn.Module):
    """A per-token classifier whose loss ignores the -100 labels."""

    def __init__(self, weight, bias):
        super().__init__()
        self.fc = torch.nn.Linear(1, weight.shape[0])
        with torch.no_grad():
            self.fc.weight.copy_(weight)
            self.fc.bias.copy_(bias)

    def forward(self, x, labels):
        logits = self.fc(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 labels.reshape(-1))
        return {"loss": loss, "logits": logits}


def dynamic_padding(samples):
    """Each batch cut to its longest sample (labels past a length are -100)."""
    x = torch.stack([s["x"] for s in samples])
    labels = torch.stack([s["labels"] for s in samples])
    longest = int(labels.ne(-100).sum(1).max())
    return {"x": x[:, :longest], "labels": labels[:, :longest]}


def padding(in_path, out_path):
    """predict() of the tagger in IN over its tokens, batches of 4: plain, and
    with an argmax as preprocess_logits_for_metrics."""
    from safetensors.torch import load_file, save_file

    t = load_file(in_path)
    data = [{"x": t["x"][i], "labels": t["labels"][i]} for i in range(t["x"].shape[0])]
    out = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, preprocess in (("plain", None), ("argmax", lambda logits, _: logits.argmax(-1))):
            args = TrainingArguments(output_dir=folder, use_cpu=True, report_to="none",
                                     per_device_eval_batch_size=4, disable_tqdm=True)
            trainer = Trainer(model=Tagger(t["weight"], t["bias"]), args=args,
                              data_collator=dynamic_padding,
                              preprocess_logits_for_metrics=preprocess)
            result = trainer.predict(data)
            out[name + ".predictions"] = torch.as_tensor(result.predictions).contiguous()
            out[name + ".label_ids"] = torch.as_tensor(result.label_ids).contiguous()
    save_file(out, out_path)


if __name__ == "__main__":
    torch.set_num_threads(1)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if sys.argv[1] == "flow":
        flow(sys.argv[2])
    else:
        padding(sys.argv[2], sys.argv[3])

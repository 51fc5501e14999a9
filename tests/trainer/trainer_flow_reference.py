"""When transformers' Trainer logs, evaluates and saves, and how its
predict() pads predictions of varying length, for
tests/trainer/trainer_flow_test.cpp.

  python trainer_flow_reference.py flow OUT.txt
  python trainer_flow_reference.py features OUT.txt
  python trainer_flow_reference.py padding IN.safetensors OUT.safetensors
  python trainer_flow_reference.py console OUT.txt

Run under $ACCELERATE_REFERENCE_PYTHON (transformers and torch); CPU only.
Each case trains a one-layer regression model on random data; the script
writes the case's settings, then the global steps at which a training loss
was logged, an evaluation ran and a checkpoint was saved. The C++ test runs
the same settings through accelerate::Trainer and compares the steps.
"features" does the same for fractional logging/eval/save steps, eval_delay,
save_strategy "best" (on scripted metric values, so that which evaluation
is a new best does not depend on the weights) and save_only_model, and also
writes the checkpoint folders left at the end with what each holds.
"console" writes the lines the Trainer prints for its logs (a Python dict
a line) in a 6-step run that logs every 2 steps and evaluates every 3, and
then the logs as log_history holds them (repr of each value).
"""
import contextlib
import io
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


# Each case: the settings that differ from DEFAULTS. "scores": the value
# compute_metrics reports as eval_score at the 1st, 2nd, ... evaluation.
DEFAULTS = dict(samples=40, batch=4, accumulation=1, max_steps=-1, epochs=1,
                logging_strategy="steps", logging_steps=500, eval_strategy="no", eval_steps=None,
                eval_delay=0, save_strategy="steps", save_steps=500, save_only_model=0,
                save_total_limit=None, metric=None, load_best=0, scores=None)
FEATURE_CASES = [
    # fractions of the 17 steps: log every 2, evaluate every 5, save every 6
    dict(max_steps=17, logging_steps=0.1, eval_strategy="steps", eval_steps=0.25, save_steps=0.3,
         save_only_model=1),
    # eval_steps defaults to logging_steps' fraction; full checkpoints, rotated
    dict(accumulation=2, epochs=2, logging_steps=0.2, eval_strategy="steps", save_steps=0.5,
         save_total_limit=2),
    # fractions as a multiple for load_best_model_at_end
    dict(max_steps=10, logging_steps=0.3, eval_strategy="steps", eval_steps=0.2, save_steps=0.4,
         load_best=1, save_only_model=1, scores="1,2,3,2,1"),
    dict(max_steps=12, logging_steps=3, eval_strategy="steps", eval_steps=3, eval_delay=7,
         save_strategy="no"),
    dict(max_steps=13, logging_steps=4, eval_strategy="steps", eval_steps=4, eval_delay=13,
         save_strategy="no"),
    dict(epochs=3, logging_strategy="epoch", eval_strategy="epoch", eval_delay=2, save_strategy="no"),
    # max_steps cuts the third epoch at 2.5: the delay of 2.5 epochs is met there
    dict(max_steps=25, epochs=3, logging_strategy="epoch", eval_strategy="epoch", eval_delay=2.5,
         save_strategy="epoch", save_only_model=1),
    dict(max_steps=12, logging_steps=2, eval_strategy="steps", eval_steps=2, save_strategy="best",
         metric="score", scores="1,3,2,5,4,6", save_total_limit=2, save_only_model=1),
    # "best" on an epoch evaluation; a loss-like name: smaller is better; the
    # best is loaded at the end and, with a limit of 1, is all that is left
    dict(epochs=4, logging_strategy="epoch", eval_strategy="epoch", save_strategy="best",
         metric="my_loss", scores="5,3,4,3", load_best=1, save_total_limit=1),
    # the last step (11) evaluated too; a delay holds back the first
    dict(max_steps=11, logging_steps=4, eval_strategy="steps", eval_steps=4, eval_delay=5,
         save_strategy="best", metric="eval_score", scores="2,1", save_total_limit=3),
]


class ScoredRegression(Regression):
    def forward(self, x, labels):
        out = self.fc(x)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


def holdings(folder):
    """What a checkpoint folder holds: model, optimizer, scheduler, rng, state."""
    kinds = set()
    for name in os.listdir(folder):
        if name.startswith("model.safetensors") or name == "pytorch_model.bin":
            kinds.add("model")
        elif name.startswith("optimizer"):
            kinds.add("optimizer")
        elif name.startswith("scheduler"):
            kinds.add("scheduler")
        elif name.startswith("rng_state"):
            kinds.add("rng")
        elif name == "trainer_state.json":
            kinds.add("state")
    return ",".join(sorted(kinds))


def run_feature(case, out):
    c = dict(DEFAULTS, **case)
    with tempfile.TemporaryDirectory() as folder:
        args = TrainingArguments(
            output_dir=folder, use_cpu=True, report_to="none", disable_tqdm=True,
            per_device_train_batch_size=c["batch"], per_device_eval_batch_size=c["batch"],
            gradient_accumulation_steps=c["accumulation"], max_steps=c["max_steps"],
            num_train_epochs=c["epochs"], logging_strategy=c["logging_strategy"],
            logging_steps=c["logging_steps"], eval_strategy=c["eval_strategy"],
            eval_steps=c["eval_steps"], eval_delay=c["eval_delay"],
            save_strategy=c["save_strategy"], save_steps=c["save_steps"],
            save_only_model=bool(c["save_only_model"]), save_total_limit=c["save_total_limit"],
            metric_for_best_model=c["metric"], load_best_model_at_end=bool(c["load_best"]),
            learning_rate=0.01, seed=1)
        recorder = Recorder()
        metric_name = (c["metric"] or "score").removeprefix("eval_")
        values = iter([float(v) for v in c["scores"].split(",")] if c["scores"] else [])
        trainer = Trainer(model=ScoredRegression(), args=args, train_dataset=data(c["samples"], 1),
                          eval_dataset=data(8, 2), callbacks=[recorder],
                          compute_metrics=lambda _: {metric_name: next(values, 0.0)})
        trainer.train()
        out.write("case " + " ".join(f"{k}={'' if v is None else v}" for k, v in c.items()) + "\n")
        for name, steps in (("log", recorder.logs), ("evaluate", recorder.evaluations),
                            ("save", recorder.saves)):
            out.write(name + "".join(f" {s}" for s in steps) + "\n")
        folders = sorted((f for f in os.listdir(folder) if f.startswith("checkpoint-")),
                         key=lambda f: int(f.split("-")[1]))
        out.write("folders" + "".join(f" {f}:{holdings(os.path.join(folder, f))}"
                                      for f in folders) + "\n")


def features(out_path):
    with open(out_path, "w") as out:
        for case in FEATURE_CASES:
            run_feature(case, out)


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


def console(out_path):
    with tempfile.TemporaryDirectory() as folder:
        args = TrainingArguments(
            output_dir=folder, use_cpu=True, report_to="none", disable_tqdm=True,
            per_device_train_batch_size=4, per_device_eval_batch_size=4, max_steps=6,
            logging_steps=2, eval_strategy="steps", eval_steps=3, save_strategy="no",
            learning_rate=0.01, seed=1)
        trainer = Trainer(model=Regression(), args=args, train_dataset=data(40, 1),
                          eval_dataset=data(8, 2))
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            trainer.train()
        with open(out_path, "w") as out:
            for line in printed.getvalue().splitlines():
                if line.startswith("{"):
                    out.write("printed " + line + "\n")
            for logs in trainer.state.log_history:
                out.write("logged " + " ".join(f"{k}={v!r}" for k, v in logs.items()) + "\n")


if __name__ == "__main__":
    torch.set_num_threads(1)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if sys.argv[1] == "flow":
        flow(sys.argv[2])
    elif sys.argv[1] == "features":
        features(sys.argv[2])
    elif sys.argv[1] == "console":
        console(sys.argv[2])
    else:
        padding(sys.argv[2], sys.argv[3])

"""transformers' schedules and Adafactor, and torch's fused AdamW (optim
"adamw_torch_fused"), for tests/trainer/trainer_reference_test.cpp.

  python trainer_reference.py schedules OUT.txt   # every rate of every case
  python trainer_reference.py adafactor OUT_DIR   # parameters, gradients, updates
  python trainer_reference.py adamw OUT_DIR       # the same for fused AdamW

Run under $ACCELERATE_REFERENCE_PYTHON (transformers and torch); CPU only.
The cases live here; the C++ test reads them from the output and replays them.
"""
import json
import sys

import torch
from transformers import Adafactor, get_scheduler

# (name, warm-up steps, training steps, lr_scheduler_kwargs)
SCHEDULES = [
    ("linear", 3, 20, {}),
    ("cosine", 3, 20, {}),
    ("cosine", 0, 17, {"num_cycles": 1.5}),
    ("constant", 0, 10, {}),
    ("constant_with_warmup", 4, 10, {}),
    ("cosine_with_restarts", 2, 30, {}),
    ("cosine_with_restarts", 2, 30, {"num_cycles": 3}),
    ("polynomial", 3, 20, {}),
    ("polynomial", 3, 20, {"lr_end": 1e-3, "power": 2.0}),
    ("polynomial", 0, 15, {"power": 0.5}),
    ("inverse_sqrt", 5, 40, {}),
    ("inverse_sqrt", 0, 40, {}),
    ("inverse_sqrt", 4, 40, {"timescale": 7}),
    ("warmup_stable_decay", 3, 30, {"num_decay_steps": 10}),
    ("warmup_stable_decay", 4, 30,
     {"num_decay_steps": 8, "num_stable_steps": 5, "warmup_type": "cosine",
      "decay_type": "linear", "min_lr_ratio": 0.1}),
    ("warmup_stable_decay", 5, 24,
     {"num_decay_steps": 6, "warmup_type": "1-sqrt", "decay_type": "1-sqrt",
      "min_lr_ratio": 0.05}),
    ("warmup_stable_decay", 2, 20, {"num_decay_steps": 10, "num_cycles": 1.0}),
]

# reduce_lr_on_plateau: kwargs; metrics come from METRICS.
PLATEAUS = [
    {},
    {"patience": 2, "factor": 0.5, "cooldown": 1},
    {"mode": "max", "threshold_mode": "abs", "threshold": 0.01, "patience": 1, "min_lr": 0.004},
]
# Falls, then wanders on a plateau, then falls a little and rises.
METRICS = [1.0 / (1 + i) for i in range(6)] + [0.15 + 0.001 * ((i * 7) % 5) for i in range(24)] + \
    [0.149, 0.1499, 0.2, 0.3, 0.25, 0.24, 0.26, 0.27, 0.28, 0.29]


def optimizer():
    a = torch.zeros(2, requires_grad=True)
    b = torch.zeros(2, requires_grad=True)
    # Default 0.05 (polynomial's lr_init), groups 0.1 and 0.01.
    return torch.optim.SGD([{"params": [a], "lr": 0.1}, {"params": [b], "lr": 0.01}], lr=0.05)


def rates(opt):
    return " ".join(repr(float(g["lr"])) for g in opt.param_groups)


def schedules(out):
    with open(out, "w") as f:
        for name, warmup, training, kwargs in SCHEDULES:
            opt = optimizer()
            sched = get_scheduler(name, opt, num_warmup_steps=warmup, num_training_steps=training,
                                  scheduler_specific_kwargs=dict(kwargs))
            f.write(f"case {name} {warmup} {training} {json.dumps(kwargs)}\n")
            f.write(f"rate 0 {rates(opt)}\n")
            for step in range(1, training + 6):
                opt.step()
                sched.step()
                f.write(f"rate {step} {rates(opt)}\n")
        for kwargs in PLATEAUS:
            opt = optimizer()
            sched = get_scheduler("reduce_lr_on_plateau", opt, scheduler_specific_kwargs=dict(kwargs))
            f.write(f"plateau {json.dumps(kwargs)}\n")
            for metric in METRICS:
                opt.step()
                sched.step(metric)
                f.write(f"metric {metric!r} {rates(opt)}\n")


# Adafactor as transformers' Trainer makes it for optim "adafactor", and with
# transformers' own defaults plus a first moment and weight decay.
ADAFACTORS = {
    "trainer": dict(lr=1e-2, scale_parameter=False, relative_step=False, warmup_init=False),
    "relative": dict(lr=None, beta1=0.9, weight_decay=0.01, clip_threshold=0.5),
}
SHAPES = [(6, 5), (5,), (3, 4, 5), (1, 7)]
STEPS = 10


def replay(out_file, seed, shapes, configs, make_optimizer):
    """Steps one optimizer per config over the same random parameters and
    gradients, and saves those and each config's parameters after the first
    and the last step."""
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    initial = [torch.randn(s, generator=gen) for s in shapes]
    grads = [[torch.randn(s, generator=gen) * (1 + step) for s in shapes] for step in range(STEPS)]
    for i, p in enumerate(initial):
        tensors[f"param.{i}"] = p.clone()
    for step in range(STEPS):
        for i, g in enumerate(grads[step]):
            tensors[f"grad.{step}.{i}"] = g.clone()
    for config, kwargs in configs.items():
        params = [p.clone().requires_grad_(True) for p in initial]
        opt = make_optimizer(params, kwargs)
        for step in range(STEPS):
            for p, g in zip(params, grads[step]):
                p.grad = g.clone()
            opt.step()
            if step in (0, STEPS - 1):
                for i, p in enumerate(params):
                    tensors[f"{config}.after{step + 1}.{i}"] = p.detach().clone()
    save_file(tensors, out_file)


def adafactor(out_dir):
    replay(f"{out_dir}/adafactor.safetensors", 1234, SHAPES, ADAFACTORS,
           lambda params, kwargs: Adafactor(params, **kwargs))


# torch.optim.AdamW(fused=True) on CPU: the Trainer's defaults (weight decay
# as its decayed group has it) and other betas, eps, no decay. The first
# shape has more elements than one thread's range in FusedAdamW.
ADAMWS = {
    "trainer": dict(lr=5e-3, weight_decay=0.01),
    "betas": dict(lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.0),
}
ADAMW_SHAPES = [(300, 257), (5,), (3, 4, 5), (1, 7)]


def adamw(out_dir):
    replay(f"{out_dir}/adamw.safetensors", 4321, ADAMW_SHAPES, ADAMWS,
           lambda params, kwargs: torch.optim.AdamW(params, fused=True, **kwargs))


if __name__ == "__main__":
    torch.set_num_threads(1)
    {"schedules": schedules, "adafactor": adafactor,
     "adamw": adamw}[sys.argv[1]](sys.argv[2])

"""What the transformers-side reference scripts of tests/models share
(llama_reference.py, bert_reference.py): spreading a tiny model's weights
so that a mistake moves its outputs well above rounding, saving it, its
gradients, and the versions used."""
import json
import os

import torch
import transformers


def spread_and_save(model, folder, shard, norm_suffix):
    """Larger weights than transformers' 0.02 init, norms (parameters ending
    in norm_suffix) away from 1; then save_pretrained into FOLDER/model,
    sharded at SHARD when given."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(norm_suffix):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.15)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(os.path.join(folder, "model"), **kwargs)


def gradients(model):
    """{"grad.<parameter>": its gradient} for every parameter that has one."""
    return {"grad." + name: p.grad.contiguous()
            for name, p in model.named_parameters() if p.grad is not None}


def write_versions(out):
    with open(os.path.join(out, "versions.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__}, f)

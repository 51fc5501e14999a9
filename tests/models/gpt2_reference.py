"""The transformers side of tests/models' GPT-2 tests: tiny random GPT-2
models and what transformers computes with them, for the C++ tests to
compare against.

  gpt2_reference.py make OUT
      For each variant: OUT/<variant>/model (GPT2LMHeadModel.save_pretrained)
      and OUT/<variant>/reference.safetensors (input_ids, labels, logits,
      hidden (the base model's last hidden state), loss, and grad.<parameter>
      after loss.backward()). OUT/hub_layout: the plain variant's weights as
      the hub's gpt2 folder holds them (no "transformer." prefix, attn.bias
      and attn.masked_bias buffers, no lm_head), written by hand.
  gpt2_reference.py logits MODEL_DIR IDS_FILE OUT_FILE
      Loads MODEL_DIR with GPT2LMHeadModel.from_pretrained (failing when a
      tensor is missing, unexpected or mis-shaped) and writes its logits for
      the input_ids in IDS_FILE (a safetensors file) to OUT_FILE.

Runs under the venv of scripts/install-reference-python.sh, on the CPU.
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel

from reference_models import gradients, spread_and_save, write_versions

VARIANTS = {
    # name: (GPT2Config overrides, max_shard_size)
    "plain": ({}, None),
    # An untied head, a narrower MLP, the exact GELU, layer-index scaling.
    "untied_scaled": (dict(tie_word_embeddings=False, n_inner=80, activation_function="gelu",
                           scale_attn_by_inverse_layer_idx=True, layer_norm_epsilon=1e-4),
                      None),
    # Unscaled attention logits, relu, saved in shards of at most 40 KB.
    "sharded": (dict(scale_attn_weights=False, activation_function="relu"), "40KB"),
}


def tiny_config(overrides):
    kwargs = dict(vocab_size=96, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                  eos_token_id=0)
    kwargs.update(overrides)
    return GPT2Config(**kwargs)


def write_hub_layout(model, folder):
    """The weights as openai-community/gpt2's model.safetensors holds them."""
    os.makedirs(folder, exist_ok=True)
    state = {}
    for name, tensor in model.state_dict().items():
        if name.startswith("transformer."):
            state[name[len("transformer."):]] = tensor.contiguous()
    n = model.config.n_positions
    for layer in range(model.config.n_layer):
        state[f"h.{layer}.attn.bias"] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
        state[f"h.{layer}.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config["architectures"] = ["GPT2LMHeadModel"]
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def make(out):
    for index, (name, (overrides, shard)) in enumerate(VARIANTS.items()):
        torch.manual_seed(4321 + index)
        config = tiny_config(overrides)
        config._attn_implementation = "eager"
        model = GPT2LMHeadModel(config)
        folder = os.path.join(out, name)
        spread_and_save(model, folder, shard, ("ln_1.weight", "ln_2.weight", "ln_f.weight"))
        if name == "plain":
            write_hub_layout(model, os.path.join(out, "hub_layout"))

        generator = torch.Generator().manual_seed(77 + index)
        ids = torch.randint(0, config.vocab_size, (2, 12), generator=generator)
        labels = ids.clone()
        labels[0, 5] = -100  # ignored positions count neither in the sum nor the mean
        labels[1, 8] = -100
        model.train()
        outputs = model(input_ids=ids, labels=labels)
        outputs.loss.backward()
        with torch.no_grad():
            hidden = model.transformer(input_ids=ids).last_hidden_state
        tensors = {
            "input_ids": ids,
            "labels": labels,
            "logits": outputs.logits.detach().contiguous(),
            "hidden": hidden.contiguous(),
            "loss": outputs.loss.detach().reshape(1),
        }
        tensors.update(gradients(model))
        save_file(tensors, os.path.join(folder, "reference.safetensors"))
    write_versions(out)


def logits(model_dir, ids_file, out_file):
    model, info = GPT2LMHeadModel.from_pretrained(model_dir, attn_implementation="eager",
                                                  output_loading_info=True)
    problems = {key: value for key, value in info.items() if value}
    if problems:
        sys.exit(f"from_pretrained({model_dir}): {problems}")
    model.eval()
    ids = load_file(ids_file)["input_ids"]
    with torch.no_grad():
        result = model(input_ids=ids).logits
    save_file({"logits": result.contiguous()}, out_file)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "logits":
        logits(*sys.argv[2:])
    else:
        sys.exit(__doc__)

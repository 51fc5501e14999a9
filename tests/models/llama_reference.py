"""The transformers side of tests/models: tiny random Llama models (and
Mistral and Qwen2 models, built from the same blocks) and what
transformers computes with them, for the C++ tests to compare against.

  llama_reference.py make OUT
      For each variant: OUT/<variant>/model (save_pretrained) and
      OUT/<variant>/reference.safetensors (input_ids, labels, logits, loss,
      and grad.<parameter> after loss.backward()).
  llama_reference.py logits MODEL_DIR IDS_FILE OUT_FILE
      Loads MODEL_DIR with from_pretrained and writes its logits for the
      input_ids in IDS_FILE (a safetensors file) to OUT_FILE.

Runs under the venv of scripts/install-reference-python.sh, on the CPU.
"""
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

from reference_models import gradients, spread_and_save, write_versions

# Three bands of Llama 3.1's rope for head_dim 16 and theta 5e5: wavelengths
# 6.3 (< 64/4: kept), 32.5 (between: blended), 168 and up (> 64/1: slowed).
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}
VARIANTS = {
    # name: (tie_word_embeddings, rope_parameters, biases, max_shard_size)
    "plain": (False, None, False, None),
    "llama3_tied": (True, LLAMA3_ROPE, False, None),
    "sharded": (False, LLAMA3_ROPE, True, "40KB"),
    # The same blocks under other model types: Mistral with a sliding window
    # shorter than the 12-token inputs (every layer), Qwen2 (q/k/v biases)
    # with a window on its second layer only (max_window_layers 1).
    "mistral_window": (False, None, None, None),
    "qwen2_window": (True, None, None, "40KB"),
}
FAMILIES = {
    "mistral_window": (MistralConfig, MistralForCausalLM, dict(sliding_window=5)),
    "qwen2_window": (Qwen2Config, Qwen2ForCausalLM,
                     dict(use_sliding_window=True, sliding_window=4, max_window_layers=1,
                          rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
}


def tiny_config(name, tied, rope, biases):
    config_class, _, extra = FAMILIES.get(name, (LlamaConfig, None, {}))
    kwargs = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        tie_word_embeddings=tied,
    )
    if biases is not None:  # Llama's settings; the other types fix their biases
        kwargs.update(attention_bias=biases, mlp_bias=biases)
    if rope is not None:
        kwargs["rope_parameters"] = dict(rope)
    kwargs.update(extra)
    return config_class(**kwargs)


def make(out):
    for index, (name, (tied, rope, biases, shard)) in enumerate(VARIANTS.items()):
        torch.manual_seed(1234 + index)
        config = tiny_config(name, tied, rope, biases)
        config._attn_implementation = "eager"
        model = FAMILIES.get(name, (None, LlamaForCausalLM))[1](config)
        folder = os.path.join(out, name)
        spread_and_save(model, folder, shard, "norm.weight")

        generator = torch.Generator().manual_seed(99 + index)
        ids = torch.randint(0, config.vocab_size, (2, 12), generator=generator)
        labels = ids.clone()
        labels[0, 4] = -100  # ignored positions count neither in the sum nor the mean
        labels[1, 7] = -100
        model.train()
        outputs = model(input_ids=ids, labels=labels)
        outputs.loss.backward()
        tensors = {
            "input_ids": ids,
            "labels": labels,
            "logits": outputs.logits.detach().contiguous(),
            "loss": outputs.loss.detach().reshape(1),
        }
        tensors.update(gradients(model))
        save_file(tensors, os.path.join(folder, "reference.safetensors"))
    write_versions(out)


def logits(model_dir, ids_file, out_file):
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager")
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

#!/usr/bin/python3
"""An independent GPT-2 forward pass, written against Hugging Face's
GPT2LMHeadModel parameter names and layout (Conv1D weights [in, out]), to
check that a model the C++ example saved loads as GPT-2 and computes the
same logits. Shares no code with the C++ side.

  gpt2_reference.py DIR     DIR holds model.safetensors and config.json
                            (save_pretrained) and io.safetensors with
                            "tokens" (I64 [batch, len]) and "logits"
                            (F32 [batch, len, vocab]) from the C++ model.
Prints the largest absolute difference; exits 1 above 1e-4.
"""
import json
import math
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "I64": torch.int64, "F64": torch.float64}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    base = 8 + length
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        start, end = entry["data_offsets"]
        raw = bytearray(data[base + start:base + end])
        tensor = torch.frombuffer(raw, dtype=DTYPES[entry["dtype"]]) if raw else \
            torch.empty(0, dtype=DTYPES[entry["dtype"]])
        tensors[name] = tensor.reshape(entry["shape"])
    return tensors


def layer_norm(x, w, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


def conv1d(x, w, b):  # GPT-2's Conv1D: x @ W + b with W [in, out]
    return x @ w + b


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(p, config, tokens):
    eps = config["layer_norm_epsilon"]
    heads = config["n_head"]
    batch, length = tokens.shape
    x = p["transformer.wte.weight"][tokens] + p["transformer.wpe.weight"][torch.arange(length)]
    for i in range(config["n_layer"]):
        pre = "transformer.h.%d." % i
        h = layer_norm(x, p[pre + "ln_1.weight"], p[pre + "ln_1.bias"], eps)
        qkv = conv1d(h, p[pre + "attn.c_attn.weight"], p[pre + "attn.c_attn.bias"])
        q, k, v = qkv.split(x.shape[-1], dim=-1)
        split = lambda t: t.view(batch, length, heads, -1).transpose(1, 2)
        q, k, v = split(q), split(k), split(v)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        mask = torch.ones(length, length, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, -1)
        x = x + conv1d(y, p[pre + "attn.c_proj.weight"], p[pre + "attn.c_proj.bias"])
        h = layer_norm(x, p[pre + "ln_2.weight"], p[pre + "ln_2.bias"], eps)
        h = gelu_new(conv1d(h, p[pre + "mlp.c_fc.weight"], p[pre + "mlp.c_fc.bias"]))
        x = x + conv1d(h, p[pre + "mlp.c_proj.weight"], p[pre + "mlp.c_proj.bias"])
    x = layer_norm(x, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], eps)
    return x @ p["transformer.wte.weight"].t()  # tied head


def main():
    directory = sys.argv[1]
    with open(directory + "/config.json") as f:
        config = json.load(f)
    assert config["model_type"] == "gpt2" and config["activation_function"] == "gelu_new"
    params = read_safetensors(directory + "/model.safetensors")
    io = read_safetensors(directory + "/io.safetensors")
    with torch.no_grad():
        logits = forward(params, config, io["tokens"])
    diff = (logits - io["logits"]).abs().max().item()
    print("max abs logit difference %.3g" % diff)
    sys.exit(0 if diff <= 1e-4 else 1)


if __name__ == "__main__":
    main()

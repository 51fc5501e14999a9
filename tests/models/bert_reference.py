"""The transformers side of the BERT tests in tests/models: tiny random BERT
models and what transformers computes with them, and the real MiniLM's
sentence embeddings, for the C++ tests to compare against.

  bert_reference.py make OUT
      For each variant: OUT/<variant>/model (save_pretrained) and
      OUT/<variant>/reference.safetensors (input_ids, attention_mask,
      token_type_ids, last_hidden_state, pooler_output, and for the
      classifiers labels, logits, loss and grad.<parameter> after backward),
      and OUT/<variant>/problem_type.txt (the problem type transformers chose).
  bert_reference.py outputs MODEL_DIR INPUTS_FILE OUT_FILE
      Loads MODEL_DIR with from_pretrained (the class its config names) and
      writes its logits, or last_hidden_state and pooler_output, for the
      inputs in INPUTS_FILE (a safetensors file) to OUT_FILE.
  bert_reference.py minilm MODEL_DIR OUT_FILE
      Tokenizes a few sentences with MODEL_DIR's tokenizer and writes the
      ids, attention_mask, token_type_ids and sentence-transformers' mean
      pooled embedding of BertModel's last hidden states.

Runs under the venv of scripts/install-reference-python.sh, on the CPU.
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, BertModel

from reference_models import gradients, spread_and_save, write_versions

VARIANTS = {
    # name: (class, num_labels, hidden_act, max_shard_size)
    "encoder": (BertModel, None, "gelu", None),
    "single_label": (BertForSequenceClassification, 3, "gelu", None),
    "regression": (BertForSequenceClassification, 1, "gelu_new", "40KB"),
    "multi_label": (BertForSequenceClassification, 4, "gelu", None),
}
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "Fine-tuning BERT in C++: does it match transformers?",
]


def tiny_config(num_labels, act):
    kwargs = dict(
        vocab_size=99,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        hidden_act=act,
        # No dropout: train-mode gradients must be deterministic to compare.
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=40,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        pad_token_id=0,
    )
    if num_labels is not None:
        kwargs["id2label"] = {i: "class_%d" % i for i in range(num_labels)}
        kwargs["label2id"] = {"class_%d" % i: i for i in range(num_labels)}
    return BertConfig(**kwargs)


def inputs(generator, vocab):
    ids = torch.randint(1, vocab, (3, 10), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # padded rows: pad ids where the mask is 0
    mask[2, 4:] = 0
    ids[mask == 0] = 0
    types = torch.zeros_like(ids)
    types[:, 5:] = 1  # a second segment
    types[mask == 0] = 0
    return ids, mask, types


def make(out):
    for index, (name, (cls, num_labels, act, shard)) in enumerate(VARIANTS.items()):
        torch.manual_seed(4321 + index)
        config = tiny_config(num_labels, act)
        config._attn_implementation = "eager"
        model = cls(config)
        folder = os.path.join(out, name)
        spread_and_save(model, folder, shard, "LayerNorm.weight")

        generator = torch.Generator().manual_seed(77 + index)
        ids, mask, types = inputs(generator, config.vocab_size)
        tensors = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        model.train()
        if cls is BertModel:
            outputs = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
            base = outputs
        else:
            if num_labels == 1:
                labels = torch.randn(3, generator=generator)
            elif num_labels == 3:
                labels = torch.tensor([2, 0, 1])
            else:
                labels = (torch.rand(3, num_labels, generator=generator) > 0.5).float()
            outputs = model(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels)
            outputs.loss.backward()
            tensors.update(
                labels=labels,
                logits=outputs.logits.detach().contiguous(),
                loss=outputs.loss.detach().reshape(1),
            )
            tensors.update(gradients(model))
            base = model.bert(input_ids=ids, attention_mask=mask, token_type_ids=types)
        tensors["last_hidden_state"] = base.last_hidden_state.detach().contiguous()
        tensors["pooler_output"] = base.pooler_output.detach().contiguous()
        with open(os.path.join(folder, "problem_type.txt"), "w") as f:
            f.write(str(model.config.problem_type))
        save_file(tensors, os.path.join(folder, "reference.safetensors"))
    write_versions(out)


def outputs(model_dir, inputs_file, out_file):
    with open(os.path.join(model_dir, "config.json")) as f:
        architecture = json.load(f)["architectures"][0]
    cls = BertForSequenceClassification if architecture == "BertForSequenceClassification" else BertModel
    model = cls.from_pretrained(model_dir, attn_implementation="eager")
    model.eval()
    given = load_file(inputs_file)
    with torch.no_grad():
        result = model(**given)
    if cls is BertModel:
        tensors = {
            "last_hidden_state": result.last_hidden_state.contiguous(),
            "pooler_output": result.pooler_output.contiguous(),
        }
    else:
        tensors = {"logits": result.logits.contiguous()}
    save_file(tensors, out_file)


def minilm(model_dir, out_file):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    model = BertModel.from_pretrained(model_dir, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    # sentence-transformers' Pooling(mean): the mean over the real tokens.
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    embedding = (hidden * mask).sum(1) / torch.clamp(mask.sum(1), min=1e-9)
    save_file(
        {
            "input_ids": batch["input_ids"].contiguous(),
            "attention_mask": batch["attention_mask"].contiguous(),
            "token_type_ids": batch["token_type_ids"].contiguous(),
            "embedding": embedding.contiguous(),
        },
        out_file,
    )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "outputs":
        outputs(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "minilm":
        minilm(*sys.argv[2:])
    else:
        sys.exit(__doc__)

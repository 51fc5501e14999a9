"""The transformers side of tests/examples/finetune_test.cpp.

  finetune_reference.py make OUT TEXT LINES [MODEL_TYPE]
      OUT/train.txt: the first LINES lines of TEXT; OUT/model: a tiny random
      LlamaForCausalLM (MODEL_TYPE qwen2: a Qwen2ForCausalLM with a sliding
      window of 16 tokens on its second layer; gpt2: a GPT2LMHeadModel
      without dropout) saved by save_pretrained, with a byte-level BPE
      tokenizer trained on OUT/train.txt by `tokenizers` (Llama 3's layout:
      BOS added by the post-processor) saved as tokenizer.json plus
      tokenizer_config.json; OUT/expected.json: the number of ids the example
      must get from OUT/train.txt (each line with its line break, encoded
      with special tokens).
  finetune_reference.py check FOLDER IDS_FILE OUT_FILE
      Loads FOLDER with AutoModelForCausalLM.from_pretrained and writes its logits
      for the input_ids of IDS_FILE (safetensors) to OUT_FILE; loads
      FOLDER/tokenizer.json with `tokenizers` and FOLDER with AutoTokenizer,
      and prints JSON with the ids both give for a sample text.

Runs under the venv of scripts/install-reference-python.sh, on the CPU.
"""
import json
import os
import re
import sys

import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel,
                          LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config,
                          Qwen2ForCausalLM)

SAMPLE = "The jury said it did find that many of Georgia's registration laws are outmoded.\n"


def lines_of(text):
    """The example's lines: up to and including each '\\n' (str.splitlines
    would also split at other breaks)."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def train_tokenizer(text):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    tok.train_from_iterator(text.split("\n"), trainers.BpeTrainer(
        vocab_size=512, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
            special_tokens=[("<|begin_of_text|>", bos)])])
    return tok


def make(out, text_path, count, model_type="llama"):
    with open(text_path, encoding="utf-8") as f:
        lines = [next(f) for _ in range(count)]
    text = "".join(lines)
    with open(os.path.join(out, "train.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    tok = train_tokenizer(text)
    torch.manual_seed(1234)
    tokens_ids = dict(vocab_size=tok.get_vocab_size(), initializer_range=0.1,
                      bos_token_id=tok.token_to_id("<|begin_of_text|>"),
                      eos_token_id=tok.token_to_id("<|end_of_text|>"))
    if model_type == "gpt2":
        config = GPT2Config(n_positions=128, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0, **tokens_ids)
        model = GPT2LMHeadModel(config)
    else:
        config_class, model_class, extra = {
            "llama": (LlamaConfig, LlamaForCausalLM, {}),
            "qwen2": (Qwen2Config, Qwen2ForCausalLM,
                      dict(use_sliding_window=True, sliding_window=16, max_window_layers=1)),
        }[model_type]
        config = config_class(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5,
            **tokens_ids, **extra)
        model = model_class(config)
    folder = os.path.join(out, "model")
    model.save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                            eos_token="<|end_of_text|>").save_pretrained(folder)
    tokens = sum(len(tok.encode(line).ids) for line in lines_of(text))
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"tokens": tokens, "vocab_size": config.vocab_size,
                   "sample_ids": tok.encode(SAMPLE).ids}, f)


def check(folder, ids_file, out_file):
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager",
                                                 dtype=torch.float32)
    model.eval()
    ids = load_file(ids_file)["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    save_file({"logits": logits.contiguous()}, out_file)
    print(json.dumps({
        "tokenizers_ids": Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        .encode(SAMPLE).ids,
        "auto_tokenizer_ids": AutoTokenizer.from_pretrained(folder)(SAMPLE)["input_ids"],
    }))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3], int(sys.argv[4]), *sys.argv[5:6])
    elif sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit("usage: finetune_reference.py make OUT TEXT LINES | check FOLDER IDS OUT")

"""Reference tokenizers for tests/text/tokenizer_json_test.cpp.

  python tokenizer_reference.py make OUT_DIR BROWN_DIR
  python tokenizer_reference.py configs OUT_DIR BROWN_DIR   (tokenizer.json files only,
                                                             for bench/text)
  python tokenizer_reference.py encode TOKENIZER_JSON INPUTS_JSON OUT_DIR
                                        (ids.txt and decoded.json of a given file,
                                         for BpeTokenizer's tokenizer.json)

Trains small tokenizers on the Brown corpus with Hugging Face `tokenizers`
(no network), assembles GPT-2-, Llama 3-, BERT- and Llama 2/Mistral-like
configurations, saves each as OUT_DIR/<variant>/tokenizer.json and writes what
`tokenizers` makes of the test inputs (OUT_DIR/inputs.json: hard strings,
every line of the corpus, then the validation text three lines at a time): ids with and without special tokens, decodes, and
for the WordPiece variants pairs with token type ids.
"""
import json
import os
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Whitespace the corpus lacks (it has no tabs, no runs of spaces and, line by
# line, no newlines): trained on, so that the vocabularies merge runs of it and
# the ids show where a pre-tokenizer's pieces begin and end.
WHITESPACE = "a  b   c    d\t\te\t\t\tf\n\n\ng \n h  \n\n  i\r\n\r\nj \n"


HARD = [
    "", " ", "  ", "\n", "\t", "Hello world", "  leading spaces", "trailing spaces   ",
    "tabs\tand\nnewlines\r\n\r\nend", "many\n\n\nnewlines   \n  x \n", "a  b   c    d\t\te",
    "Café naïve façade résumé", "e\u0301 combining a\u0308o\u0302 n\u0303", "Ünïcödé ÜNÏCÖDÉ",
    "中文字符测试 mixed with English", "日本語のテキスト、句読点。", "한국어 텍스트",
    "emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flag 🇫🇷 heart ❤️", "zero\u200bwidth\u200djoiner",
    "numbers 1234567 3.14159 1,000,000 ٣٤٥", "don't I'm we'll they've she's it'd you're DON'T",
    "'s 're 've 'S 'LL", "punctuation!!! ??? ... --- (brackets) [x] {y} <<>>",
    "<|endoftext|> special in text <|endoftext|>", "a<|endoftext|>b<|endoftext|>",
    "[CLS] bert [SEP] tokens [MASK] here", "<s> llama </s> tokens <unk>",
    "<|begin_of_text|>hi<|eot_id|> there", "x <mask> y<mask>z", "foo <sep>   bar <sep>",
    "ΑΒΓ Ελληνικά ΣΊΣΥΦΟΣ", "İstanbul ǅ ß ﬁ ŉ", "Ωmega ℃ ½ ² Ⅻ", "\u00a0nbsp\u3000ideographic",
    "control\u0007bell\u0000nul\u200esoft", "\ufffd replacement", "x" * 300,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "mixed\u2028line\u2029separators\u0085", "https://example.com/path?q=1&r=2#frag",
    "Mr. Smith's $3.50 -- 50% off!", "FULTON COUNTY and fulton  county, Fulton County",
    " \t \n", "🙂", "ﷺ ‍ ‮ rtl", "a zyzzyva here", "x\n \n\ty", "a \n\n b", "  \n\n  ",
    "end  ", "\r\n\r\n x", WHITESPACE, "1234567890 12 1 ١٢٣٤", "ПРИВЕТ Мир ΕΛΛΗΝΙΚΆ",
]


def corpus_lines(brown):
    lines = []
    for name in ("train.txt", "validation.txt"):
        with open(os.path.join(brown, name), encoding="utf-8") as f:
            lines.extend(line.rstrip("\n") for line in f)
    return lines


def train_lines(brown):
    with open(os.path.join(brown, "train.txt"), encoding="utf-8") as f:
        lines = [line for line in f.read().split("\n") if line]
    # Paragraphs too, for newlines between words.
    chunks = ["\n\n".join(lines[i:i + 4]) for i in range(0, len(lines), 4)]
    return lines + chunks + [WHITESPACE] * 300


def paragraphs(brown):
    """The validation text three lines at a time, with its blank lines."""
    with open(os.path.join(brown, "validation.txt"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    return ["\n".join(lines[i:i + 3]) for i in range(0, len(lines), 3)]


def byte_level(texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=3000, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return json.loads(tok.to_str())


def llama3(texts):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=3000, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    # A whole word in the vocabulary that the merges would split: with
    # ignore_merges it stays one token.
    config = json.loads(tok.to_str())
    config["model"]["vocab"]["Ġzyzzyva"] = len(config["model"]["vocab"])
    tok = Tokenizer.from_str(json.dumps(config))
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
            special_tokens=[("<|begin_of_text|>", bos)])])
    return json.loads(tok.to_str())


def wordpiece(texts):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    # Words outside ASCII (the corpus has none), so that lowercasing them shows.
    foreign = ["中文字符测试日本語のテキスト", "привет мир ελληνικά σίσυφος αβγ"] * 50
    tok.train_from_iterator(texts + foreign, trainers.WordPieceTrainer(
        vocab_size=3000, special_tokens=specials, show_progress=False))
    # A normalized added token: matched in the lowercased text.
    tok.add_tokens([AddedToken("Fulton County", normalized=True)])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return json.loads(tok.to_str())


def byte_fallback(texts):
    """A Llama 2 style vocabulary: <unk> <s> </s>, the 256 <0xNN> tokens, merges."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=3000, show_progress=False))
    trained = json.loads(tok.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for token, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(token, len(vocab))
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(["<unk>", "<s>", "</s>"])]
    template = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                         {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": "<s>", "type_id": 1}},
                         {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    model = {"type": "BPE", "dropout": None, "unk_token": "<unk>",
             "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
             "byte_fallback": True, "ignore_merges": False, "vocab": vocab,
             "merges": trained["merges"]}
    llama2 = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
              "normalizer": {"type": "Sequence", "normalizers": [
                  {"type": "Prepend", "prepend": "▁"},
                  {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
              "pre_tokenizer": None, "post_processor": template,
              "decoder": {"type": "Sequence", "decoders": [
                  {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                  {"type": "ByteFallback"}, {"type": "Fuse"},
                  {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
              "model": model}
    # Mistral-like: the Metaspace pre-tokenizer and decoder, no byte fallback,
    # so characters outside the vocabulary become (fused) <unk>.
    mistral = json.loads(json.dumps(llama2))
    mistral["normalizer"] = None
    mistral["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁",
                                "prepend_scheme": "first", "split": False}
    mistral["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                          "split": False}
    mistral["model"]["byte_fallback"] = False
    return llama2, mistral


def variants(texts):
    gpt2 = byte_level(texts)
    # Older files spell merges "a b"; newer ones [a, b]: keep one of each.
    gpt2["model"]["merges"] = [" ".join(m) for m in gpt2["model"]["merges"]]
    gpt2_prefix = byte_level(texts)
    gpt2_prefix["pre_tokenizer"]["add_prefix_space"] = True
    tok = Tokenizer.from_str(json.dumps(gpt2_prefix))
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, special=True)])
    tok.add_tokens([AddedToken("<sep>", rstrip=True, normalized=False)])
    gpt2_prefix = json.loads(tok.to_str())
    bert = wordpiece(texts)
    bert_cased = json.loads(json.dumps(bert))
    bert_cased["normalizer"] = {"type": "BertNormalizer", "clean_text": True,
                                "handle_chinese_chars": True, "strip_accents": None,
                                "lowercase": False}
    bert_cased["post_processor"] = {"type": "BertProcessing", "sep": ["[SEP]", 3],
                                    "cls": ["[CLS]", 2]}
    llama2, mistral = byte_fallback(texts)
    return {"gpt2": gpt2, "gpt2_prefix": gpt2_prefix, "llama3": llama3(texts), "bert": bert,
            "bert_cased": bert_cased, "llama2": llama2, "mistral": mistral}


def write_ids(path, encodings, field="ids"):
    with open(path, "w") as f:
        f.write("\n".join(" ".join(map(str, getattr(e, field))) for e in encodings) + "\n")


TRUNCATION_STRATEGIES = ("longest_first", "only_first", "only_second")
TRUNCATION_LENGTHS = (2, 3, 4, 5, 7, 10, 16, 32)


def truncated(tok, pairs):
    """For each truncation strategy and max_length (those at least the
    special tokens' count: below it tokenizers' arithmetic wraps around),
    the ids and type ids of every pair and of every HARD text, or None where
    tokenizers refuses (a sequence too short to cut, no second sequence)."""
    def encode(*texts):
        try:
            e = tok.encode(*texts, add_special_tokens=True)
            return [e.ids, e.type_ids]
        except Exception:
            return None
    result = {}
    for strategy in TRUNCATION_STRATEGIES:
        for length in TRUNCATION_LENGTHS:
            tok.enable_truncation(length, strategy=strategy)
            entry = {}
            if length >= tok.num_special_tokens_to_add(is_pair=True):
                entry["pairs"] = [encode(a, b) for a, b in pairs]
            if length >= tok.num_special_tokens_to_add(is_pair=False):
                entry["texts"] = [encode(text) for text in HARD]
            result[f"{strategy} {length}"] = entry
    tok.no_truncation()
    return result


def make(out, brown):
    inputs = HARD + corpus_lines(brown) + paragraphs(brown)
    with open(os.path.join(out, "inputs.json"), "w") as f:
        json.dump({"hard": len(HARD), "inputs": inputs}, f)
    texts = train_lines(brown)
    pairs = [(HARD[i], HARD[(i + 7) % len(HARD)]) for i in range(len(HARD))]
    for name, config in variants(texts).items():
        folder = os.path.join(out, name)
        os.makedirs(folder)
        text = json.dumps(config, ensure_ascii=False, indent=2)
        with open(os.path.join(folder, "tokenizer.json"), "w") as f:
            f.write(text)
        tok = Tokenizer.from_str(text)
        encodings = tok.encode_batch(inputs, add_special_tokens=True)
        write_ids(os.path.join(folder, "ids.txt"), encodings)
        write_ids(os.path.join(folder, "plain_ids.txt"),
                  tok.encode_batch(HARD, add_special_tokens=False))
        ids = [e.ids for e in encodings]
        with open(os.path.join(folder, "decoded.json"), "w") as f:
            json.dump({"skip": tok.decode_batch(ids, skip_special_tokens=True),
                       "keep": tok.decode_batch(ids[:len(HARD)], skip_special_tokens=False)}, f)
        pair_encodings = tok.encode_batch(pairs, add_special_tokens=True)
        write_ids(os.path.join(folder, "pair_ids.txt"), pair_encodings)
        write_ids(os.path.join(folder, "pair_types.txt"), pair_encodings, "type_ids")
        with open(os.path.join(folder, "truncated.json"), "w") as f:
            json.dump(truncated(tok, pairs), f)
    with open(os.path.join(out, "pairs.json"), "w") as f:
        json.dump(pairs, f)


def configs(out, brown):
    for name, config in variants(train_lines(brown)).items():
        os.makedirs(os.path.join(out, name), exist_ok=True)
        with open(os.path.join(out, name, "tokenizer.json"), "w") as f:
            json.dump(config, f, ensure_ascii=False, indent=2)


def encode(path, inputs_path, out):
    tok = Tokenizer.from_file(path)
    with open(inputs_path) as f:
        inputs = json.load(f)["inputs"]
    encodings = tok.encode_batch(inputs, add_special_tokens=False)
    write_ids(os.path.join(out, "ids.txt"), encodings)
    with open(os.path.join(out, "decoded.json"), "w") as f:
        json.dump(tok.decode_batch([e.ids for e in encodings], skip_special_tokens=False), f)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "encode":
        encode(sys.argv[2], sys.argv[3], sys.argv[4])
        sys.exit(0)
    if len(sys.argv) != 4 or sys.argv[1] not in ("make", "configs"):
        sys.exit("usage: tokenizer_reference.py make|configs OUT_DIR BROWN_DIR")
    (make if sys.argv[1] == "make" else configs)(sys.argv[2], sys.argv[3])

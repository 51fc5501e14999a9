"""Hugging Face `tokenizers`' side of bench/text/tokenizer_bench.cpp.

  RAYON_NUM_THREADS=1 python tokenizer_bench.py CORPUS_FILE REPEATS DIR...

Encodes every line of CORPUS_FILE with each DIR/tokenizer.json, one thread
(the caller sets RAYON_NUM_THREADS=1), in batches so that Python's per-call
cost is not counted: encode_batch_fast (no offsets, the fairer comparison, as
accelerate::Tokenizer computes none) and encode_batch. Prints "DIR
fast_seconds seconds tokens" per tokenizer, each the best of REPEATS runs.
"""
import sys
import time

from tokenizers import Tokenizer


def main():
    corpus, repeats, folders = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    with open(corpus, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for folder in folders:
        tok = Tokenizer.from_file(folder + "/tokenizer.json")
        tok.encode_batch(lines[:100])  # warm-up
        best = {}
        for encode in (tok.encode_batch_fast, tok.encode_batch):
            best[encode] = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                encodings = encode(lines)
                best[encode] = min(best[encode], time.perf_counter() - start)
                tokens = sum(len(e.ids) for e in encodings)
        print(folder, best[tok.encode_batch_fast], best[tok.encode_batch], tokens, flush=True)


if __name__ == "__main__":
    main()

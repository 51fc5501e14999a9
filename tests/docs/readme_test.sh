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

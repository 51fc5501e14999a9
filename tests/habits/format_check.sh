#!/usr/bin/env bash
# habits.format: every C++ file of the project (tracked, or new and not
# ignored) is as the committed .clang-format writes it. First it proves the
# check can fail: clang-format must reject a badly formatted snippet.
# Usage: format_check.sh CLANG_FORMAT SOURCE_DIR
set -euo pipefail
clang_format=$1 source_dir=$2
cd "$source_dir"
if printf 'int  x ;\n' | "$clang_format" --dry-run --Werror --assume-filename=probe.cpp 2>/dev/null; then
  echo "habits.format: $clang_format accepted a badly formatted snippet: the check is not running" >&2
  exit 1
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.h' '*.cpp' '*.cu')
else
  mapfile -t files < <(find include src tests bench examples -name '*.h' -o -name '*.cpp' -o -name '*.cu')
fi
# Each difference is printed as file:line with the expected text; fix them
# all with: clang-format -i $(git ls-files '*.h' '*.cpp' '*.cu')
"$clang_format" --dry-run --Werror "${files[@]}"
echo "habits.format: ${#files[@]} files as .clang-format writes them"

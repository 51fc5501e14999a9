#!/usr/bin/env bash
# A compile-fail test: building TARGET (excluded from `all`) must fail with
# exactly one error, and that error must contain EXPECTED.
# Usage: compile_fail_test.sh BUILD_DIR TARGET EXPECTED
set -uo pipefail
build_dir=$1 target=$2 expected=$3
out=$(cmake --build "$build_dir" --target "$target" 2>&1)
status=$?
if ((status == 0)); then
  echo "FAIL: $target compiled, but must not"
  exit 1
fi
errors=$(grep -c 'error:' <<<"$out" || true)
# assert: the expected message, and no other error
if ! grep -qF -- "$expected" <<<"$out"; then
  echo "FAIL: the build failed without the expected message: $expected"
  echo "$out"
  exit 1
fi
if ((errors != 1)); then
  echo "FAIL: expected exactly 1 error, the compiler printed $errors:"
  grep 'error:' <<<"$out"
  exit 1
fi
echo "ok: $target is refused with one error: $(grep 'error:' <<<"$out" | sed 's/.*error: //')"

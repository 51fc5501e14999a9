#!/usr/bin/env bash
# LibTorch 2.6 (Debian 13 "trixie") in a chroot, to build and test the compat
# layer against LibTorch 2.x on a machine without a GPU (docs/building.md).
#
#   scripts/torch2-chroot.sh ensure       make sure the chroot exists and is ready
#   scripts/torch2-chroot.sh run CMD...   run CMD in the chroot, in /src
#
# The chroot lives at /var/cache/accelerate-cpp/trixie (ACCELERATE_CHROOT_DIR).
# It is ready when it holds a marker that is written last, after every step
# succeeded, and that records the recipe (suite, package list, versions below):
# changing the recipe makes `ensure` redo the package step, and changing
# BASE_RECIPE makes it debootstrap from nothing. Work happens in "$dir.tmp",
# which is renamed into place at the end; a finished but unmarked "$dir.tmp"
# (e.g. one made by hand, or an interrupted run) is adopted, not rebuilt.
#
# `run` mounts, for this run only: the repository at /src, /proc, /sys, /dev,
# /dev/pts, /dev/shm (Gloo uses sockets and shared memory), the host's
# /etc/hosts (read-only) and the ccache directory
# /var/cache/accelerate-cpp/ccache-torch2 (ACCELERATE_TORCH2_CCACHE_DIR) at the
# same path inside, with CCACHE_DIR pointing to it.
#
# Mount safety and concurrency:
# - Every run (and the package step of `ensure`) gets its own root: a
#   non-recursive bind of the chroot at "$dir.run/XXXXXX", with everything else
#   mounted under it. Concurrent runs therefore never share a mount point.
# - That happens in a private mount namespace (unshare --mount --propagation
#   private) whenever unshare works: the mounts are never visible on the host
#   and the kernel drops them when the run ends, even on SIGKILL. Without
#   unshare (or with ACCELERATE_CHROOT_NO_UNSHARE=1) the same mounts are made
#   on the host, in a private subtree.
# - Either way a trap unmounts them on every exit path (normal exit, failure,
#   SIGINT/SIGTERM/SIGHUP): `umount`, then `umount -l` as a fallback. The run
#   directory is removed with rmdir only, after checking /proc/self/mountinfo.
# - The command runs in its own session (setsid); a signal to this script
#   is forwarded to every process of it, which get SIGKILL after 10 s; what
#   the command leaves running when it exits is stopped the same way.
# - Runs hold a shared flock on "$dir.lock" and `ensure` takes it exclusively
#   only when it has work to do, so it never renames or deletes a chroot in use.
# - Nothing is ever deleted with a mount below it (checked in
#   /proc/self/mountinfo first), and deletions use rm --one-file-system.
set -euo pipefail

script_path=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)/$(basename "${BASH_SOURCE[0]}")
script_dir=$(dirname "$script_path")
repo_root=$(git -C "$script_dir" rev-parse --show-toplevel 2>/dev/null) ||
  repo_root=$(cd "$script_dir/.." && pwd -P)

CHROOT_DIR=${ACCELERATE_CHROOT_DIR:-/var/cache/accelerate-cpp/trixie}
CHROOT_DIR=${CHROOT_DIR%/}
TMP_DIR=$CHROOT_DIR.tmp
RUNS_DIR=$CHROOT_DIR.run
LOCK_FILE=$CHROOT_DIR.lock
READY_MARKER=.accelerate-chroot-ready
BASE_MARKER=.accelerate-chroot-base
CCACHE_HOST_DIR=${ACCELERATE_TORCH2_CCACHE_DIR:-/var/cache/accelerate-cpp/ccache-torch2}
CCACHE_CHROOT_DIR=/var/cache/accelerate-cpp/ccache-torch2
SUITE=trixie
MIRROR=${ACCELERATE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# Bump BASE_RECIPE to force a fresh debootstrap; bump RECIPE when the package
# step changes in a way the package list below does not show.
BASE_RECIPE=1
RECIPE=1
PACKAGES=(libtorch-dev libgloo-dev g++ cmake ninja-build ccache lld libgtest-dev libgmock-dev
          libopenblas0-pthread python3 procps iproute2 libyaml-cpp-dev nlohmann-json3-dev
          libprotobuf-dev protobuf-compiler python3-protobuf tmux)
CHILD_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
STOP_GRACE_S=10

say()  { printf 'torch2-chroot: %s\n' "$*" >&2; }
die()  { printf 'torch2-chroot: error: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '5,6s/^# \{0,1\}//p' "$script_path" >&2
  printf '(details in the header of %s)\n' "$script_path" >&2
  exit 2
}

base_marker_text() {
  printf 'base-recipe=%s\nsuite=%s\nvariant=minbase\n' "$BASE_RECIPE" "$SUITE"
}
ready_marker_text() {
  base_marker_text
  printf 'recipe=%s\npackages=%s\n' "$RECIPE" "${PACKAGES[*]}"
}

is_ready() {
  [[ -f "$CHROOT_DIR/$READY_MARKER" ]] &&
    [[ "$(cat "$CHROOT_DIR/$READY_MARKER")" == "$(ready_marker_text)" ]]
}

# Mount points at or below $1 in this mount namespace, deepest first.
mounts_under() {
  local root=$1 mp
  while read -r _ _ _ _ mp _; do
    mp=$(printf '%b' "$mp")            # mountinfo escapes blanks as \040 etc.
    if [[ "$mp" == "$root" || "$mp" == "$root"/* ]]; then
      printf '%s\n' "$mp"
    fi
  done </proc/self/mountinfo | sort -r
}

assert_no_mounts() {
  local found
  found=$(mounts_under "$1")
  [[ -z "$found" ]] || die "refusing to touch $1: still mounted below it: ${found//$'\n'/ }"
}

# Deletes a chroot tree, but only when nothing is mounted anywhere below it.
remove_tree() {
  local dir=$1
  [[ -e "$dir" ]] || return 0
  [[ "$dir" == /*/* && "$dir" != *..* ]] || die "refusing to delete suspicious path '$dir'"
  assert_no_mounts "$dir"
  say "removing $dir"
  rm -rf --one-file-system -- "$dir"
}

# A debootstrapped trixie tree that finished (debootstrap deletes /debootstrap
# only on success) and was made by this base recipe, or by hand (no marker).
base_reusable() {
  local dir=$1
  [[ -x "$dir/usr/bin/apt-get" && ! -e "$dir/debootstrap" ]] || return 1
  if [[ -f "$dir/$BASE_MARKER" ]]; then
    [[ "$(cat "$dir/$BASE_MARKER")" == "$(base_marker_text)" ]]
  else
    grep -qx "VERSION_CODENAME=$SUITE" "$dir/etc/os-release" 2>/dev/null
  fi
}

have_unshare() {
  [[ "${ACCELERATE_CHROOT_NO_UNSHARE:-0}" != 1 ]] &&
    unshare --mount --propagation private true 2>/dev/null
}

open_lock() {
  mkdir -p "$(dirname "$LOCK_FILE")"
  exec 9>>"$LOCK_FILE"
}

require_root() {
  ((EUID == 0)) || die "must run as root (it mounts and chroots)"
}

# ---------------------------------------------------------------- ensure ----

bootstrap() {
  local dir=$1
  command -v debootstrap >/dev/null 2>&1 ||
    die "debootstrap not found: run scripts/install-deps.sh"
  say "debootstrap --variant=minbase $SUITE into $dir ($MIRROR)"
  debootstrap --variant=minbase "$SUITE" "$dir" "$MIRROR" ||
    die "debootstrap failed (the partial tree in $dir is rebuilt next time)"
  base_marker_text >"$dir/$BASE_MARKER"
}

# Installs the packages into a debootstrapped tree. Returns apt's status.
provision() {
  local dir=$1 rc=0
  # Replace, never write through: the chroot's resolv.conf may be a symlink.
  rm -f -- "$dir/etc/resolv.conf"
  if [[ -f /etc/resolv.conf ]]; then
    cp -L /etc/resolv.conf "$dir/etc/resolv.conf" || return 1
  fi
  rm -f -- "$dir/usr/sbin/policy-rc.d"
  printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d" && chmod 755 "$dir/usr/sbin/policy-rc.d" || return 1
  mkdir -p "$dir/src" "$dir$CCACHE_CHROOT_DIR" "$dir/proc" "$dir/sys" "$dir/dev" || return 1
  say "installing in the chroot: ${PACKAGES[*]}"
  enter_root call "$dir" bare / /bin/sh -ec '
      dpkg --configure -a
      apt-get update -q
      apt-get install -y -q --no-install-recommends "$@"
      apt-get clean' sh "${PACKAGES[@]}" || rc=$?
  ((rc == 0)) || return "$rc"
  [[ -f "$dir/usr/lib/x86_64-linux-gnu/cmake/Torch/TorchConfig.cmake" ]] || {
    say "TorchConfig.cmake missing in the chroot after installing libtorch-dev"; return 1; }
}

# Per-run roots left by killed runs (mounts only without unshare; otherwise
# empty directories). Call only with the lock held exclusively: no run is
# active then.
clean_stale_runs() {
  local d m
  for d in "$RUNS_DIR"/*/; do
    [[ -d "$d" ]] || continue
    d=${d%/}
    for m in $(mounts_under "$d"); do
      say "unmounting stale $m"
      umount -- "$m" 2>/dev/null || umount -l -- "$m"
    done
    assert_no_mounts "$d"
    rmdir -- "$d" 2>/dev/null || say "warning: could not remove stale run directory $d (not empty)"
  done
}

cmd_ensure() {
  require_root
  open_lock
  flock -s 9
  if is_ready; then
    # Tidy up after killed runs, but only when no run is active right now.
    if flock -n -x 9; then
      clean_stale_runs
    fi
    say "ready: $CHROOT_DIR"
    return 0
  fi
  # Exclusive from here: waits for runs in progress to finish.
  flock -n -x 9 || { say "waiting for other users of $CHROOT_DIR"; flock -x 9; }
  if is_ready; then
    say "ready: $CHROOT_DIR"
    return 0
  fi
  local t0=$SECONDS rc=0
  trap 'say "interrupted; the partial chroot in $TMP_DIR is resumed or rebuilt next time"; exit 130' INT
  trap 'say "terminated; the partial chroot in $TMP_DIR is resumed or rebuilt next time"; exit 143' TERM

  clean_stale_runs

  if [[ -e "$CHROOT_DIR" ]]; then
    assert_no_mounts "$CHROOT_DIR"
    if [[ ! -e "$TMP_DIR" ]] && base_reusable "$CHROOT_DIR"; then
      say "$CHROOT_DIR is not ready for this recipe: redoing its package step"
      rm -f -- "$CHROOT_DIR/$READY_MARKER"
      mv -T -- "$CHROOT_DIR" "$TMP_DIR"
    else
      remove_tree "$CHROOT_DIR"
    fi
  fi
  if [[ -e "$TMP_DIR" ]]; then
    assert_no_mounts "$TMP_DIR"
    if base_reusable "$TMP_DIR"; then
      say "adopting the finished debootstrap in $TMP_DIR"
      provision "$TMP_DIR" || rc=$?
      if ((rc >= 128)); then
        exit "$rc"
      elif ((rc != 0)); then
        say "package step failed in the adopted tree (status $rc): starting from nothing"
        remove_tree "$TMP_DIR"
      fi
    else
      say "$TMP_DIR is an unfinished debootstrap: starting from nothing"
      remove_tree "$TMP_DIR"
    fi
  fi
  if [[ ! -e "$TMP_DIR" ]]; then
    bootstrap "$TMP_DIR"
    rc=0
    provision "$TMP_DIR" || rc=$?
    ((rc == 0)) || { ((rc >= 128)) && exit "$rc"; die "package step failed in $TMP_DIR (status $rc)"; }
  fi
  base_marker_text >"$TMP_DIR/$BASE_MARKER"
  ready_marker_text >"$TMP_DIR/$READY_MARKER"
  sync -f "$TMP_DIR/$READY_MARKER" 2>/dev/null || sync
  mv -T -- "$TMP_DIR" "$CHROOT_DIR"
  trap - INT TERM
  say "ready: $CHROOT_DIR (set up in $((SECONDS - t0)) s)"
}

# ------------------------------------------------------------------- run ----

cmd_run() {
  (($# > 0)) || die "usage: $0 run CMD [ARG...]"
  require_root
  open_lock
  flock -s 9
  is_ready || die "the LibTorch 2.6 chroot at $CHROOT_DIR is not ready: run '$script_path ensure' first"
  enter_root exec "$CHROOT_DIR" build /src "$@"
}

# enter_root exec|call ROOT MODE WORKDIR CMD...: runs CMD inside ROOT with the
# mounts of MODE (bare: /proc /sys /dev; build: also /src, ccache, /etc/hosts),
# in a private mount namespace when possible. With `exec` this process becomes
# the per-run process (same PID), so whoever signals this script signals it.
enter_root() {
  local how=$1; shift
  local cmd=("$BASH" "$script_path" __in-root "$@")
  if have_unshare; then
    cmd=(unshare --mount --propagation private -- "${cmd[@]}")
  fi
  if [[ "$how" == exec ]]; then
    exec "${cmd[@]}"
  fi
  "${cmd[@]}"
}

# ---- everything below runs in the per-run process (__in-root) ----

run_root=
mounted=()
child=

do_mount() {     # do_mount TARGET MOUNT-ARGS...
  local target=$1; shift
  # The target must be a real path below the run root: a symlink in the
  # chroot must never redirect a mount onto the host.
  [[ "$(realpath -e -- "$target" 2>/dev/null)" == "$target" ]] ||
    die "mount target $target is missing or is reached through a symlink"
  mount "$@" "$target"
  mounted+=("$target")
}

cleanup_mounts() {
  local i m left
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    m=${mounted[i]}
    umount -- "$m" 2>/dev/null || umount -l -- "$m" 2>/dev/null ||
      say "warning: could not unmount $m"
  done
  mounted=()
  if [[ -n "$run_root" && -d "$run_root" ]]; then
    left=$(mounts_under "$run_root")
    if [[ -z "$left" ]]; then
      rmdir -- "$run_root" 2>/dev/null || say "warning: could not remove $run_root"
    else
      say "warning: still mounted, not removing $run_root: ${left//$'\n'/ }"
    fi
  fi
  run_root=
}

# Live (non-zombie) processes of the command's session, which setsid made
# with the command as leader: the command and everything it started, even
# children that moved to process groups of their own.
session_pids() {
  local pid stat
  if command -v ps >/dev/null 2>&1; then
    { ps -o pid=,stat= --sid "$1" 2>/dev/null || true; } | while read -r pid stat; do
      [[ "$stat" == Z* ]] || printf '%s\n' "$pid"
    done
  elif kill -0 -- "-$1" 2>/dev/null; then
    printf '%s\n' "$1"       # no ps: at least the process group is alive
  fi
  return 0
}

# signal_session SIG SID: signals the process group and every process of the
# session, each by its id.
signal_session() {
  local sig=$1 sid=$2 pid
  kill -s "$sig" -- "-$sid" 2>/dev/null || true
  for pid in $(session_pids "$sid"); do
    kill -s "$sig" "$pid" 2>/dev/null || true
  done
}

# Stops the command's session: SIG, then SIGKILL after the grace period.
stop_child() {
  local sig=$1 i
  [[ -n "$child" ]] || return 0
  signal_session "$sig" "$child"
  for ((i = 0; i < STOP_GRACE_S * 10; i++)); do
    [[ -n "$(session_pids "$child")" ]] || break
    sleep 0.1
  done
  signal_session KILL "$child"
  wait "$child" 2>/dev/null || true
  child=
}

on_signal() {
  local sig=$1
  trap '' INT TERM HUP
  say "caught SIG$sig: stopping the command and unmounting"
  stop_child "$sig"
  cleanup_mounts
  trap - EXIT "$sig"
  kill -s "$sig" $$     # die of the same signal, so callers see it
  exit $((128 + $(kill -l "$sig")))
}

in_root() {
  local target=$1 mode=$2 workdir=$3
  shift 3
  (($# > 0)) || die "no command given"
  [[ -e /proc/self/fd/0 ]] || exec </dev/null      # stdin may be closed in CI

  trap cleanup_mounts EXIT
  trap 'on_signal INT' INT
  trap 'on_signal TERM' TERM
  trap 'on_signal HUP' HUP

  target=$(realpath -e -- "$target")
  mkdir -p "$RUNS_DIR"
  run_root=$(realpath -e -- "$(mktemp -d "$RUNS_DIR/XXXXXX")")

  do_mount "$run_root" --bind "$target"
  mount --make-private "$run_root"   # nothing below propagates to the chroot dir
  do_mount "$run_root/proc" --bind /proc
  do_mount "$run_root/sys" --bind /sys
  do_mount "$run_root/dev" --bind /dev
  do_mount "$run_root/dev/pts" --bind /dev/pts
  do_mount "$run_root/dev/shm" --bind /dev/shm
  local envs=(HOME=/root "PATH=$CHILD_PATH" LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive)
  if [[ "$mode" == build ]]; then
    mkdir -p "$run_root/src" "$run_root$CCACHE_CHROOT_DIR" "$CCACHE_HOST_DIR"
    do_mount "$run_root/src" --bind "$repo_root"
    do_mount "$run_root$CCACHE_CHROOT_DIR" --bind "$CCACHE_HOST_DIR"
    if [[ -f /etc/hosts && -f "$run_root/etc/hosts" && ! -L "$run_root/etc/hosts" ]]; then
      do_mount "$run_root/etc/hosts" --bind /etc/hosts
      mount -o remount,bind,ro "$run_root/etc/hosts" 2>/dev/null || true
    fi
    envs+=("CCACHE_DIR=$CCACHE_CHROOT_DIR" "CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}"
           CCACHE_BASEDIR=/src)
  fi
  [[ -n "${TERM:-}" ]] && envs+=("TERM=$TERM")
  local name
  for name in $(compgen -e); do
    case $name in
      CCACHE_DIR | CCACHE_MAXSIZE | CCACHE_BASEDIR) ;;
      CI | ACCELERATE_* | CTEST_* | CCACHE_* | OMP_* | OPENBLAS_* | MKL_* | GLOO_* | \
      TORCH_* | GTEST_* | CMAKE_BUILD_PARALLEL_LEVEL | NINJA_STATUS | VERBOSE)
        envs+=("$name=${!name}") ;;
    esac
  done

  # Own session and process group (so signals reach all of it), default
  # SIGINT/SIGQUIT (bash ignores them in background jobs), no lock fd.
  setsid -w env --default-signal=INT,QUIT \
    chroot "$run_root" /usr/bin/env -i -C "$workdir" "${envs[@]}" "$@" <&0 9>&- &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  # Leftovers of the command (daemons, stragglers) would keep the mounts busy.
  local left
  left=$(session_pids "$child")
  if [[ -n "$left" ]]; then
    say "stopping processes the command left behind: ${left//$'\n'/ }"
    stop_child TERM
  fi
  child=
  cleanup_mounts
  exit "$rc"
}

# ------------------------------------------------------------------ main ----

case "${1:-}" in
  ensure) shift; (($# == 0)) || usage; cmd_ensure ;;
  run) shift; cmd_run "$@" ;;
  __in-root) shift; in_root "$@" ;;
  -h | --help | help) usage ;;
  *) usage ;;
esac

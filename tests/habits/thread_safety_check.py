#!/usr/bin/env python3
"""Clang's thread-safety analysis over the library's locking code.

The sources checked are those that include common/mutex.h, or a header that
includes it directly (the headers that declare guarded state): only they can
lock a detail::Mutex or touch what one guards. Each is compiled with
`clang++ -fsyntax-only -Wthread-safety -Werror=thread-safety` and the include
directories and definitions the library compiles with, read from the build's
compile_commands.json (the library is a unity build there, so its entries
name batch files, not sources: the flags are taken from one of them and the
sources are found here).

Then the check must be able to fail: bad_locking.cpp (a guarded member
touched without its lock, and friends) must be rejected, with exactly the
diagnostics its `expected-error` comments name (clang's -verify).

Usage: thread_safety_check.py --clang CLANG++ --source-dir DIR --build-dir DIR
"""

import argparse
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import time

CHECK_FLAGS = ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety"]
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
MUTEX_HEADER = "common/mutex.h"


def library_flags(build_dir):
    """-I/-isystem/-D/-std flags of the library's own compile commands."""
    path = os.path.join(build_dir, "compile_commands.json")
    with open(path) as f:
        entries = json.load(f)
    marker = os.sep.join(["CMakeFiles", "accelerate.dir", ""])
    for entry in entries:
        command = entry.get("command")
        args = shlex.split(command) if command else entry.get("arguments", [])
        if not any(marker in a for a in args):
            continue
        kept, i = [], 1  # args[0] is the compiler (GCC): its other flags are not clang's
        while i < len(args):
            a = args[i]
            if a in ("-I", "-isystem", "-iquote", "-D", "-U"):
                kept += [a, args[i + 1]]
                i += 2
                continue
            if a.startswith(("-I", "-isystem", "-iquote", "-D", "-U", "-std=")):
                kept.append(a)
            i += 1
        return kept
    sys.exit(f"FAIL: no compile command of the library (CMakeFiles/accelerate.dir) in {path}")


def sources_to_check(src_dir):
    includes = {}
    for root, _, names in os.walk(src_dir):
        for name in names:
            if name.endswith((".h", ".cpp")):
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as f:
                    includes[os.path.relpath(path, src_dir)] = set(INCLUDE.findall(f.read()))
    annotated = {MUTEX_HEADER} | {
        h for h, inc in includes.items() if h.endswith(".h") and MUTEX_HEADER in inc
    }
    return sorted(
        os.path.join(src_dir, f)
        for f, inc in includes.items()
        if f.endswith(".cpp") and inc & annotated
    )


def run_clang(clang, flags, source):
    started = time.monotonic()
    result = subprocess.run([clang, *CHECK_FLAGS, *flags, source], capture_output=True, text=True)
    return source, result.returncode, result.stdout + result.stderr, time.monotonic() - started


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--clang", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()

    src_dir = os.path.join(args.source_dir, "src")
    flags = library_flags(args.build_dir)
    sources = sources_to_check(src_dir)
    if len(sources) < 2:
        sys.exit(f"FAIL: found {len(sources)} sources that use {MUTEX_HEADER}; expected several")

    # The check can fail: a file with known mistakes is rejected, and clang
    # reports exactly the mistakes it names, no more and no fewer.
    bad = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad_locking.cpp")
    _, status, output, _ = run_clang(args.clang, flags, bad)
    if status == 0 or "-Werror,-Wthread-safety" not in output:
        print(output)
        sys.exit("FAIL: clang accepted bad_locking.cpp: the analysis is not running")
    _, status, output, _ = run_clang(args.clang, flags + ["-Xclang", "-verify"], bad)
    if status != 0:
        print(output)
        sys.exit("FAIL: clang's diagnostics for bad_locking.cpp differ from its expected-errors")
    print("ok: clang rejects bad_locking.cpp with the expected thread-safety errors")

    failed = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for source, status, output, seconds in pool.map(
            lambda s: run_clang(args.clang, flags, s), sources
        ):
            name = os.path.relpath(source, args.source_dir)
            print(f"{'ok' if status == 0 else 'FAIL'}: {name} ({seconds:.1f} s)")
            if status != 0:
                print(output)
                failed.append(name)
    if failed:
        sys.exit(f"FAIL: thread-safety errors (or no compile) in {len(failed)} of "
                 f"{len(sources)} sources: {' '.join(failed)}")
    print(f"ok: {len(sources)} sources pass clang's -Wthread-safety")


if __name__ == "__main__":
    main()

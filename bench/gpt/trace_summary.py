#!/usr/bin/python3
"""Op-by-op comparison of two profiler traces of one training step:
bench/gpt/gpt_profile --trace (C++) and bench/gpt/gpt_twin.py --trace
(Python), both LibTorch's legacy profiler in Chrome trace JSON.

Self time per op name (an op's duration less the ops nested in it on the
same thread), ms, side by side, largest first; then the totals.

Usage: trace_summary.py CPP.json PY.json [--top 25]
"""

import argparse
import collections
import json


def self_times(path):
    with open(path) as f:
        data = json.load(f)
    events = data if isinstance(data, list) else data["traceEvents"]
    by_thread = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            by_thread[e.get("tid")].append((float(e["ts"]), float(e["dur"]), e["name"]))
    total, count = collections.Counter(), collections.Counter()
    for spans in by_thread.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack = []  # [end, name, self]
        for ts, dur, name in spans:
            while stack and ts >= stack[-1][0]:
                end, n, own = stack.pop()
                total[n] += own
            if stack:
                stack[-1][2] -= dur
            stack.append([ts + dur, name, dur])
            count[name] += 1
        for end, n, own in stack:
            total[n] += own
    return {n: (t / 1000.0, count[n]) for n, t in total.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cpp")
    ap.add_argument("python")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    a, b = self_times(args.cpp), self_times(args.python)
    names = sorted(set(a) | set(b), key=lambda n: -max(a.get(n, (0, 0))[0], b.get(n, (0, 0))[0]))
    print("%-44s %10s %6s %10s %6s %9s" % ("op (self time)", "C++ ms", "calls", "Py ms", "calls",
                                          "C++ - Py"))
    for n in names[:args.top]:
        (ta, ca), (tb, cb) = a.get(n, (0, 0)), b.get(n, (0, 0))
        print("%-44s %10.1f %6d %10.1f %6d %+9.1f" % (n[:44], ta, ca, tb, cb, ta - tb))
    ta, tb = sum(t for t, _ in a.values()), sum(t for t, _ in b.values())
    print("%-44s %10.1f %6d %10.1f %6d %+9.1f" % ("all ops", ta, sum(c for _, c in a.values()), tb,
                                                 sum(c for _, c in b.values()), ta - tb))


if __name__ == "__main__":
    main()

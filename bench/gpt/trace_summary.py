#!/usr/bin/python3
"""Where one training step's time goes, from profiler traces of that step:
bench/gpt/gpt_profile --trace (C++) and bench/gpt/gpt_twin.py --trace
(Python); one trace, or two side by side (bench/gpt/run_gpt_profile.sh).

Reads the Chrome trace JSON of LibTorch 1.13's and 2.x's profilers: the
legacy profiler's list of events (gpt_profile on any LibTorch, the twin on
torch 1.13) and Kineto's {"traceEvents": [...]} (the twin on torch 2.x,
whose extra "Trace" span and flow events are left out).

Self time of an op = its duration less the ops nested in it on the same
thread. The step's span is the main thread's first op start to last op end;
"between ops" is the part of that span no op covers (the program's own code:
Python, the Trainer, autograd's engine between nodes, waits that record no
op such as the C++ gradient reducer's). Ops on other threads (Python DDP's
gloo all-reduces) overlap the main thread and are listed apart.

Views (all by default):
  phases    the main thread's time per phase, found on the op timeline:
            forward (everything before the first backward node), backward
            (first autograd node to the first clipping norm: the nodes and
            a gradient reducer's last work), clip (one norm
            per gradient, the total norm, the coefficient, one mul_ per
            gradient), optimizer (to the last addcdiv_/zero_/detach_ or
            Optimizer.* annotation: AdamW, schedule, zero_grad), log (the
            rest: the loss as a number, its mean over processes)
  families  self time per op family (FAMILIES below), ms and % of the
            step's span. optimizer and clip hold every op inside those
            phases but matmul, autograd and communication ones (AdamW's
            mul_/add_/sqrt, clipping's norm/mul_); communication holds the
            c10d/gloo ops and Python DDP's own records (its forward
            wrapper, the reducer's copies); autograd the engine's and its
            nodes' own time (a kernel runs inside its op, not its node),
            but a custom C++ function's node (CppNode<...FusedTanhGelu>)
            counts in the family its name says. The C++ gradient reducer's
            all-reduces run on a thread the profiler does not record:
            gpt_profile prints their time (comm_ms, exposed_ms)
  matrix    (--matrix) family x phase, ms, for each trace
  ops       self time per op name, largest first (--top)

Usage: trace_summary.py A.json [B.json] [--labels C++ Python] [--top 25]
                        [--view phases,families,ops] [--matrix]
"""

import argparse
import collections
import json
import re
import sys

PHASES = ("forward", "backward", "clip", "optimizer", "log")

# Family by op name (the aten:: prefix dropped, lower case), first match wins.
FAMILIES = [
    ("communication", r"allreduce|all_reduce|gloo|c10d|nccl|broadcast|all_?gather|reduce_scatter"
                      r"|barrier|alltoall|all_to_all|reducer::|ddp\.|distributeddataparallel"),
    ("matmul", r"^(mm|addmm_?|bmm|baddbmm_?|matmul|linear|addmv|mv|dot|_addmm_activation|mkldnn_.*matmul.*"
               r"|mkldnn_linear.*|_mkldnn_.*)$"),
    ("loss", r"log_softmax|nll_loss|cross_?entropy"),
    ("attention", r"softmax_backward_data$|^_?softmax$|causal_?softmax|causal_attention|^masked_fill_?$|scaled_dot_product|flash|"
                  r"efficient_attention|^triu_?$|^tril_?$"),
    ("activation", r"gelu|silu|relu|^tanh|sigmoid"),
    ("norm", r"layer_norm|rms_norm|batch_norm|group_norm"),
    ("embedding", r"embedding|index_select|^index_add_?$|^index$|index_put"),
    ("optimizer", r"^optimizer\.|^_foreach_|^addcdiv_$|^addcmul_$|^lerp_$|^sqrt$|adam"),
    ("clip", r"^norm$|linalg_vector_norm|frobenius_norm|^clamp(_max|_min)?_?$|clip_grad"),
    ("cast/copy", r"^copy_$|^_to_copy$|^to$|^clone$|^contiguous$|^type_as$|_local_scalar_dense|^item$"),
    ("memory", r"^fill_$|^zero_$|^zeros(_like)?$|^ones(_like)?$|^empty|^full(_like)?$|^new_|^resize_$"
               r"|^scalar_tensor$|^arange$|^lift|^set_$"),
    ("view/shape", r"^(view|reshape|_reshape_alias|as_strided|transpose|t|permute|expand|expand_as"
                   r"|unsqueeze|squeeze|select|slice|_unsafe_view|split|split_with_sizes|chunk|unbind"
                   r"|narrow|alias|resolve_conj|resolve_neg|stack|cat|flatten|unflatten|numpy_t"
                   r"|_unsafe_split|view_as|movedim|select_backward|slice_backward|_conj|conj"
                   r"|expand_backward|sum_to_size)$"),
    ("reduction", r"^(sum|mean|max|min|amax|amin|argmax|prod|var|std)$"),
    ("elementwise", r"^(add|add_|mul|mul_|div|div_|sub|sub_|rsub|neg|exp|exp_|pow|pow_|where|abs"
                    r"|reciprocal|rsqrt|log|masked_scatter|eq|ne|lt|gt|le|ge|bitwise_.*|logical_.*"
                    r"|dropout|native_dropout|bernoulli_|threshold_backward|addcmul|addcdiv|lerp|sqrt_"
                    r"|clamp_min_|maximum|minimum|sign|floor|ceil|round|fmod|remainder)$"),
]
# Autograd's own records (case matters: MmBackward0 is a node, mm_backward
# an op): engine events, nodes, gradient accumulation, detach.
AUTOGRAD = re.compile(r"^autograd::|^torch::autograd::|^[A-Z]\w*Backward\d*$|AccumulateGrad"
                      r"|^(detach|detach_)$")
FAMILY_ORDER = [f for f, _ in FAMILIES[:1]] + ["autograd"] + [f for f, _ in FAMILIES[1:]] + ["other"]
_FAMILY_RE = [(f, re.compile(p)) for f, p in FAMILIES]
# Families that keep their name inside the clip and optimizer phases; any
# other op there counts as clip or optimizer.
KEEP_IN_PHASE = {"communication", "matmul", "autograd"}


def short(name):
    return name[6:] if name.startswith("aten::") else name


def family_of(name):
    # A custom autograd function (torch::autograd::CppNode<...FusedTanhGelu>)
    # runs its own kernel inside its node: the family of its name, if any.
    custom = re.match(r"torch::autograd::CppNode<(.*)>$", name)
    if custom and family_from_name(custom.group(1).split("::")[-1]) not in ("other", "communication"):
        return family_from_name(custom.group(1).split("::")[-1])
    if AUTOGRAD.search(short(name)):
        return "communication" if family_from_name(name) == "communication" else "autograd"
    return family_from_name(name)


def family_from_name(name):
    n = short(name).lower()
    for family, pattern in _FAMILY_RE:
        if pattern.search(n):
            return family
    return "other"


class Trace:
    """One trace: per-thread op nesting, self times, phases."""

    def __init__(self, path):
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as error:
            sys.exit("trace_summary: error: %s: %s" % (path, error))
        events = data if isinstance(data, list) else data.get("traceEvents")
        if not isinstance(events, list):
            sys.exit("trace_summary: error: %s: no trace events (not a Chrome trace?)" % path)
        by_thread = collections.defaultdict(list)
        for e in events:
            # Kineto also writes a "Trace" span over the whole recording and
            # python_function events (with_stack); neither is an op.
            if e.get("ph") != "X" or e.get("cat") in ("Trace", "python_function", "kernel",
                                                        "gpu_memcpy", "gpu_memset", "cuda_runtime",
                                                        "cuda_driver"):
                continue
            try:
                span = (float(e["ts"]), float(e["dur"]), str(e["name"]))
            except (KeyError, TypeError, ValueError):
                continue
            by_thread[(str(e.get("pid")), str(e.get("tid")))].append(span)
        if not by_thread:
            sys.exit("trace_summary: error: %s: no complete (\"ph\": \"X\") events" % path)
        # The main thread: the one whose ops cover the most time.
        self.ops = {}  # thread -> [(start, dur, name, self, top-level index)]
        self.top = {}  # thread -> [(start, end, name)] of depth-0 ops
        cover = {}
        for thread, spans in by_thread.items():
            spans.sort(key=lambda s: (s[0], -s[1]))
            ops, top, stack = [], [], []  # stack: indices into ops
            for ts, dur, name in spans:
                while stack and ts >= ops[stack[-1]][0] + ops[stack[-1]][1] - 1e-9:
                    stack.pop()
                if stack:
                    ops[stack[-1]][3] -= dur
                else:
                    top.append((ts, ts + dur, name))
                ops.append([ts, dur, name, dur, len(top) - 1])
                stack.append(len(ops) - 1)
            self.ops[thread], self.top[thread] = ops, top
            cover[thread] = sum(e - s for s, e, _ in top)
        self.main = max(cover, key=cover.get)
        top = self.top[self.main]
        self.span_ms = (max(e for _, e, _ in top) - top[0][0]) / 1000.0
        self.covered_ms = cover[self.main] / 1000.0
        self.phase_of_top = self._phases(top)

    @staticmethod
    def _phases(top):
        """The phase of each depth-0 op of the main thread (see the views)."""
        n = len(top)
        is_backward = [bool(AUTOGRAD.search(short(name))) and short(name) not in ("detach", "detach_")
                       for _, _, name in top]
        if not any(is_backward):
            return ["forward"] * n  # no backward in the trace: one phase
        first = is_backward.index(True)
        last = n - 1 - is_backward[::-1].index(True)
        phase = ["forward"] * first + ["backward"] * (last + 1 - first) + ["log"] * (n - last - 1)
        after = list(range(last + 1, n))
        # clip: per-gradient norms and the total norm, then one mul_ per
        # gradient (or one _foreach_mul_), then maybe the norm as a number.
        norms = [i for i in after if re.search(r"^(norm|linalg_vector_norm|_foreach_norm)$",
                                               short(top[i][2]))]
        clip_end = last
        if norms:
            # What runs between the last node and the first norm finishes
            # the backward (a gradient reducer's last bucket).
            for i in range(last + 1, norms[0]):
                phase[i] = "backward"
            last = norms[0] - 1
            clip_end = norms[-1]
            grads = len(norms) - 1
            foreach = short(top[norms[0]][2]).startswith("_foreach")
            for i in range(norms[-1] + 1, n):
                name = short(top[i][2])
                if foreach and name == "_foreach_mul_":
                    clip_end = i
                    break
                if not foreach and name == "mul_":
                    grads -= 1
                    clip_end = i
                    if grads <= 0:
                        break
                elif name.startswith(("addcmul", "addcdiv", "lerp", "_foreach_add", "Optimizer")):
                    break  # the optimizer began: the scaling was skipped
                else:
                    clip_end = i
            if clip_end + 1 < n and short(top[clip_end + 1][2]) in ("item", "_local_scalar_dense"):
                clip_end += 1
            for i in range(last + 1, clip_end + 1):
                phase[i] = "clip"
        # optimizer: to the last op of AdamW's update or zero_grad.
        opt_end = None
        for i in range(clip_end + 1, n):
            name = short(top[i][2])
            if re.search(r"^(addcdiv_|_foreach_addcdiv_|zero_|_foreach_zero_|detach_|fill_)$|"
                         r"^Optimizer\.", name):
                opt_end = i
        if opt_end is not None:
            for i in range(clip_end + 1, opt_end + 1):
                phase[i] = "optimizer"
        return phase

    def summary(self):
        """{"ops": name -> [ms, calls], "families": family -> ms (main thread),
        "other_threads": family -> ms, "phases": phase -> ms (covered),
        "matrix": (family, phase) -> ms}"""
        ops = collections.defaultdict(lambda: [0.0, 0])
        families, other_threads = collections.Counter(), collections.Counter()
        phases, matrix = collections.Counter(), collections.Counter()
        for thread, events in self.ops.items():
            for ts, dur, name, own, top_index in events:
                own_ms = own / 1000.0
                ops[name][0] += own_ms
                ops[name][1] += 1
                family = family_of(name)
                if thread != self.main:
                    other_threads[family] += own_ms
                    continue
                phase = self.phase_of_top[top_index]
                if phase in ("clip", "optimizer") and family not in KEEP_IN_PHASE:
                    family = phase
                families[family] += own_ms
                matrix[(family, phase)] += own_ms
        top = self.top[self.main]
        for i, (start, end, _) in enumerate(top):
            phases[self.phase_of_top[i]] += (end - start) / 1000.0
        # The gaps between depth-0 ops belong to the phase of the op after them.
        end = top[0][1]
        for i in range(1, len(top)):
            matrix[("between ops", self.phase_of_top[i])] += max(0.0, top[i][0] - end) / 1000.0
            end = max(end, top[i][1])
        families["between ops"] = max(0.0, self.span_ms - self.covered_ms)
        return {"ops": ops, "families": families, "other_threads": other_threads, "phases": phases,
                "matrix": matrix}


def pct(ms, span):
    return 100.0 * ms / span if span > 0 else 0.0


def print_phases(traces, labels, sums):
    print("per phase (main thread, from the op timeline; gaps between ops go to the next op's phase)")
    head = "%-14s" % "phase"
    for label in labels:
        head += " %10s %6s" % (label + " ms", "%")
    print(head)
    for phase in PHASES:
        row = "%-14s" % phase
        for t, s in zip(traces, sums):
            ms = s["phases"][phase] + sum(v for (f, p), v in s["matrix"].items()
                                           if f == "between ops" and p == phase)
            row += " %10.1f %5.1f%%" % (ms, pct(ms, t.span_ms))
        print(row)
    row = "%-14s" % "step (span)"
    for t in traces:
        row += " %10.1f %5.1f%%" % (t.span_ms, 100.0)
    print(row)


def print_families(traces, labels, sums):
    print("per op family (self time on the main thread; % of the step's span)")
    head = "%-16s" % "family"
    for label in labels:
        head += " %10s %6s" % (label + " ms", "%")
    if len(traces) == 2:
        head += " %9s" % "A - B ms"
    print(head)
    order = FAMILY_ORDER + ["between ops"]
    for family in order:
        values = [s["families"].get(family, 0.0) for s in sums]
        if not any(v > 0.0005 for v in values):
            continue
        row = "%-16s" % family
        for t, v in zip(traces, values):
            row += " %10.1f %5.1f%%" % (v, pct(v, t.span_ms))
        if len(traces) == 2:
            row += " %+9.1f" % (values[0] - values[1])
        print(row)
    row = "%-16s" % "step (span)"
    for t in traces:
        row += " %10.1f %5.1f%%" % (t.span_ms, 100.0)
    if len(traces) == 2:
        row += " %+9.1f" % (traces[0].span_ms - traces[1].span_ms)
    print(row)
    others = [s["other_threads"] for s in sums]
    if any(sum(o.values()) > 0 for o in others):
        print("other threads (overlap the main thread's step, not part of its span):")
        for family in FAMILY_ORDER:
            values = [o.get(family, 0.0) for o in others]
            if any(v > 0.0005 for v in values):
                print("  %-14s" % family + "".join(" %10.1f %6s" % (v, "") for v in values))


def print_matrix(trace, label, s):
    print("%s: family x phase (ms, main thread)" % label)
    print("%-16s" % "family" + "".join(" %9s" % p for p in PHASES) + " %9s" % "all")
    for family in FAMILY_ORDER + ["between ops"]:
        values = [s["matrix"].get((family, p), 0.0) for p in PHASES]
        if sum(values) > 0.0005:
            print("%-16s" % family + "".join(" %9.1f" % v for v in values) + " %9.1f" % sum(values))


def print_ops(labels, sums, top_n):
    print("per op (self time, all threads), largest first")
    maps = [s["ops"] for s in sums]
    names = sorted(set().union(*maps), key=lambda n: -max(m.get(n, (0, 0))[0] for m in maps))
    head = "%-40s %-13s" % ("op", "family")
    for label in labels:
        head += " %10s %6s" % (label + " ms", "calls")
    if len(maps) == 2:
        head += " %9s" % "A - B"
    print(head)

    def row(title, cells, family=""):
        line = "%-40s %-13s" % (title[:40], family[:13])
        for ms, calls in cells:
            line += " %10.1f %6d" % (ms, calls)
        if len(cells) == 2:
            line += " %+9.1f" % (cells[0][0] - cells[1][0])
        print(line)

    for n in names[:top_n]:
        row(n, [m.get(n, (0.0, 0)) for m in maps], family_of(n))
    row("all ops", [(sum(v[0] for v in m.values()), sum(v[1] for v in m.values())) for m in maps])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+", metavar="TRACE.json", help="one or two traces")
    ap.add_argument("--labels", nargs="+", help="column labels (default: C++ Py for two, A for one)")
    ap.add_argument("--top", type=int, default=25, help="ops in the per-op view")
    ap.add_argument("--view", default="phases,families,ops",
                    help="comma-separated: phases, families, ops (default: all three)")
    ap.add_argument("--matrix", action="store_true", help="also family x phase per trace")
    args = ap.parse_args()
    if len(args.traces) > 2:
        ap.error("one or two traces")
    labels = args.labels or (["C++", "Py"] if len(args.traces) == 2 else ["A"])
    if len(labels) != len(args.traces):
        ap.error("--labels needs one label per trace")
    views = [v.strip() for v in args.view.split(",") if v.strip()]
    for v in views:
        if v not in ("phases", "families", "ops"):
            ap.error("unknown view %r (phases, families, ops)" % v)
    traces = [Trace(p) for p in args.traces]
    sums = [t.summary() for t in traces]
    print("step span: " + ", ".join("%s %.1f ms (%s)" % (l, t.span_ms, p)
                                    for l, t, p in zip(labels, traces, args.traces)))
    for i, v in enumerate(views):
        print()
        if v == "phases":
            print_phases(traces, labels, sums)
        elif v == "families":
            print_families(traces, labels, sums)
        else:
            print_ops(labels, sums, args.top)
    if args.matrix:
        for t, l, s in zip(traces, labels, sums):
            print()
            print_matrix(t, l, s)


if __name__ == "__main__":
    main()

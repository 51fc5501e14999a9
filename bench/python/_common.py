"""Shared set-up for the Python reference scripts (threads, process group).

Import this module BEFORE torch: OpenBLAS and OpenMP read their thread
counts from the environment when the libraries load.

Rank layout comes from the torchrun-style variables RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT (LOCAL_RANK / LOCAL_WORLD_SIZE optional). When they
are absent the script runs as one plain process. (torchrun itself crashes on
Debian's torch 1.13 with Python 3.11; use bench/python/launch.sh or set the
variables yourself.)
"""

import os
import sys


def _int_env(name, default=None):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        sys.exit("error: %s=%r is not an integer" % (name, v))


RANK = _int_env("RANK", 0)
WORLD_SIZE = _int_env("WORLD_SIZE", 1)
LOCAL_WORLD_SIZE = _int_env("LOCAL_WORLD_SIZE", WORLD_SIZE)
DISTRIBUTED = "RANK" in os.environ and "WORLD_SIZE" in os.environ and WORLD_SIZE >= 1 \
    and "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# Threads per process: OMP_NUM_THREADS when set, else cores / local ranks.
THREADS = _int_env("OMP_NUM_THREADS") or max(1, _cores() // max(1, LOCAL_WORLD_SIZE))
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
# Debian's OpenBLAS (pthread build) has its own pool beside torch's OpenMP
# pool; leaving it at its default oversubscribes the cores (up to ~3x slower).
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(THREADS))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

torch.set_num_threads(THREADS)


def init():
    """Joins the gloo group when launched as a rank; returns (rank, world)."""
    if DISTRIBUTED:
        import datetime
        dist.init_process_group("gloo", init_method="env://", rank=RANK,
                                world_size=WORLD_SIZE,
                                timeout=datetime.timedelta(seconds=120))
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def finish():
    if DISTRIBUTED and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def describe():
    return ("torch %s, python %s, world %d, threads/process %d "
            "(OMP_NUM_THREADS=%s OPENBLAS_NUM_THREADS=%s)"
            % (torch.__version__, sys.version.split()[0], WORLD_SIZE if DISTRIBUTED else 1,
               torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS"),
               os.environ.get("OPENBLAS_NUM_THREADS")))

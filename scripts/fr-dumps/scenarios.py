"""Run real PyTorch (Gloo, ranks on 127.0.0.1) through flight-recorder scenarios and write
each rank's dump, pickle and JSON, the way a hung job leaves them.

Usage: python scenarios.py OUT_DIR [scenario ...]   (see make.sh)
Each rank dumps after its part ends (the collective timed out, or it finished), into
OUT_DIR/<scenario>/pickle/nccl_trace_rank_<N> and OUT_DIR/<scenario>/json/nccl_trace_rank_<N>.json.
A rank that dies (os._exit) writes nothing, as a killed rank would.
"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch._C import _distributed_c10d as c10d

WORLD = 4
TIMEOUT_S = 4


def dump(out, rank):
    for kind in ("pickle", "json"):
        os.makedirs(os.path.join(out, kind), exist_ok=True)
    # Stack traces name this checkout's paths: left out to keep the data small and portable.
    pk = c10d._dump_fr_trace(includeCollectives=True, includeStackTraces=False, onlyActive=False)
    with open(os.path.join(out, "pickle", f"nccl_trace_rank_{rank}"), "wb") as f:
        f.write(pk)
    js = c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=False)
    with open(os.path.join(out, "json", f"nccl_trace_rank_{rank}.json"), "wb") as f:
        f.write(js)


def warmup(n=3):
    for _ in range(n):
        dist.all_reduce(torch.ones(4))


def attempt(fn):
    """Run a collective that may time out or fail: a hung job's ranks dump afterwards."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the timeout or Gloo's error is the point
        print(f"rank {dist.get_rank()}: {type(e).__name__}: {str(e)[:160]}", file=sys.stderr)


def healthy(rank):
    warmup(4)
    dist.broadcast(torch.arange(8.0), src=0)
    dist.all_gather(list(torch.zeros(WORLD, 2).unbind()), torch.ones(2))
    dist.barrier()


def skip(rank):
    # Rank 2 never enters the 4th all_reduce: it is busy elsewhere (a data-loader stall).
    warmup()
    if rank == 2:
        time.sleep(TIMEOUT_S + 2)
        return
    attempt(lambda: dist.all_reduce(torch.ones(4)))


def dies(rank):
    # Rank 3 is killed before the 4th all_reduce (OOM killer, a node reboot).
    warmup()
    if rank == 3:
        os._exit(9)
    attempt(lambda: dist.all_reduce(torch.ones(4)))


def mismatch_op(rank):
    # Rank 1 calls broadcast where the others call all_reduce (a code path one rank took).
    warmup()
    if rank == 1:
        attempt(lambda: dist.broadcast(torch.ones(4), src=1))
    else:
        attempt(lambda: dist.all_reduce(torch.ones(4)))


def mismatch_size(rank):
    # Rank 1 reduces 8 elements where the others reduce 4 (an uneven last batch).
    warmup()
    attempt(lambda: dist.all_reduce(torch.ones(8 if rank == 1 else 4)))


def mismatch_dtype(rank):
    # Rank 3 reduces float64 where the others reduce float32.
    warmup()
    dt = torch.float64 if rank == 3 else torch.float32
    attempt(lambda: dist.all_reduce(torch.ones(4, dtype=dt)))


def subgroup(rank):
    # Two groups of two; in group [2, 3] rank 3 never enters the 3rd all_reduce.
    warmup(2)
    a = dist.new_group([0, 1])
    b = dist.new_group([2, 3])
    mine = a if rank < 2 else b
    for _ in range(2):
        dist.all_reduce(torch.ones(4), group=mine)
    if rank == 3:
        time.sleep(TIMEOUT_S + 2)
        return
    attempt(lambda: dist.all_reduce(torch.ones(4), group=mine))


def p2p(rank):
    # Pipeline stages 0 -> 1 -> 2 -> 3, but rank 2 receives from 0 instead of 1.
    warmup(2)
    t = torch.ones(4)
    if rank == 0:
        attempt(lambda: dist.send(t, dst=1))
    elif rank == 1:
        attempt(lambda: dist.recv(t, src=0))
        attempt(lambda: dist.send(t, dst=2))
    elif rank == 2:
        attempt(lambda: dist.recv(t, src=0))
        attempt(lambda: dist.send(t, dst=3))
    else:
        attempt(lambda: dist.recv(t, src=2))


def wrapped(rank):
    # Buffer of 6 entries: ranks 1-3 run 10 all_reduces in their own group after rank 0
    # stopped early, so their records of the default group's last op fell off the ring.
    warmup(2)
    g = dist.new_group([1, 2, 3])
    if rank == 0:
        attempt(lambda: dist.all_reduce(torch.ones(4)))
        return
    for _ in range(10):
        dist.all_reduce(torch.ones(4), group=g)
    time.sleep(TIMEOUT_S + 2)


SCENARIOS = {f.__name__: f for f in
             (healthy, skip, dies, mismatch_op, mismatch_size, mismatch_dtype, subgroup, p2p, wrapped)}
BUFFER = {"wrapped": 6}


def worker(rank, name, out, port):
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(BUFFER.get(name, 20))
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
        timeout=datetime.timedelta(seconds=TIMEOUT_S),
    )
    SCENARIOS[name](rank)
    dump(os.path.join(out, name), rank)
    # Let the slower ranks dump before the store (rank 0) goes away.
    time.sleep(TIMEOUT_S + 3)
    os._exit(0)


def main():
    out = sys.argv[1]
    names = sys.argv[2:] or list(SCENARIOS)
    for i, name in enumerate(names):
        print(f"scenario {name}", file=sys.stderr)
        mp.start_processes(worker, args=(name, out, 29500 + i), nprocs=WORLD, join=False,
                           start_method="spawn")
        # Joining would raise on the rank that died on purpose: wait on the files instead.
        time.sleep(3 * TIMEOUT_S + 12)
    # Ranks still sleeping past this were spawned detached: they exit on their own.


if __name__ == "__main__":
    main()

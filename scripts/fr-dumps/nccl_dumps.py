"""Build NCCL-backend flight-recorder dumps (and the job's NCCL log) from the format as
PyTorch's source defines it: no GPU here, so these are imitations, labelled so in
tests/data/flight-recorder/README.md. Plain Python, no torch.

Usage: python nccl_dumps.py OUT_DIR   (writes OUT_DIR/nccl/<job>/{pickle,json}/, nccl.log)

Per version (FlightRecorder.hpp's version_val and its keys): 2.2 (torch 2.4: no pg_status,
no thread fields), 2.4 (pg_status, numbers), 2.10 (torch 2.8+: comm_lib_version, thread
id/name; pg_status numbers in the pickle, strings in JSON).
"""

import json
import os
import pickle
import sys

HOSTS = {0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b"}
T0 = 1_780_000_000_000_000_000


def entry(version, rid, seq, op, state, sizes=((1024,),), dtype="Float", p2p=False, p2p_seq=0):
    e = {
        "record_id": rid,
        "pg_id": 0,
        # A new tuple per entry, as torch's C++ pickler writes it: Python would memoize one
        # shared tuple, which serde-pickle 1.2 refuses ("recursive structure found").
        "process_group": tuple(["0", "default_pg"]),
        "collective_seq_id": 0 if p2p else seq,
        "p2p_seq_id": p2p_seq,
        "op_id": rid + 1,
        "profiling_name": op,
        "time_created_ns": T0 + rid * 1_000_000,
        "input_sizes": [list(s) for s in sizes],
        "input_dtypes": [dtype] * len(sizes),
        "output_sizes": [list(s) for s in sizes],
        "output_dtypes": [dtype] * len(sizes),
        "state": state,
        "time_discovered_started_ns": T0 + rid * 1_000_000 + 10 if state != "scheduled" else None,
        "time_discovered_completed_ns": T0 + rid * 1_000_000 + 20 if state == "completed" else None,
        "retired": state == "completed",
        "timeout_ms": 600000,
        "is_p2p": p2p,
        "duration_ms": 1.5 if state == "completed" else None,
    }
    if version == "2.10":
        e["thread_id"] = "140000000000000"
        e["thread_name"] = "pt_main_thread"
    return e


def dump(version, entries, last):
    d = {
        "version": version,
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
        "entries": entries,
        "nccl_comm_state": {"0x7f3c2c002f70": {"nranks": "4", "commHash": "1234567890"}},
    }
    if version != "2.2":
        done = max([e["collective_seq_id"] for e in entries if e["state"] == "completed"] or [0])
        d["pg_status"] = {"0": {"last_enqueued_collective": last, "last_started_collective": last,
                                "last_completed_collective": done}}
    if version == "2.10":
        d["comm_lib_version"] = "2.27.5"
    return d


def to_json(d):
    j = json.loads(json.dumps(d))
    for e in j["entries"]:
        for k in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            e[k] = e[k] or 0
    for s in j.get("pg_status", {}).values():
        for k in s:
            s[k] = str(s[k])
    return j


def collectives(version, upto, state_last, skip_last=False):
    """seq 1..upto all_reduce, all completed but the last (state_last)."""
    n = upto - 1 if skip_last else upto
    return [entry(version, i, i + 1, "nccl:all_reduce", "completed" if i + 1 < upto else state_last)
            for i in range(n)]


def coalesced_job(version, rank, odd=None):
    """A step of a training loop that coalesces (PyTorch >= 2.7 records each op of a
    coalescing block, then the block's end, all under the one sequence number the block's
    start took: ProcessGroupNCCL::startCoalescing): seq 1 all_reduce; seq 2 a
    `_coalescing_manager` block of three all_reduce; seq 3 an uneven all_gather (one
    `_broadcast_oop` per root, end `nccl:ALLGATHER_coalesced`); seq 4 the fast path
    `all_gather_into_tensor_coalesced` (one entry); a batch_isend_irecv ring (P2P, end
    `nccl:coalesced` with is_p2p); seq 5 all_reduce. Inner ops carry no CUDA events, so
    they stay `scheduled`; the block's end carries the state. `odd` = (seq, sizes of the
    block's 2nd op): this rank's block differs there, and the job stops in that block."""
    es = []

    def add(seq, op, state, sizes=((1024,),), p2p=False, p2p_seq=0):
        es.append(entry(version, len(es), seq, op, state, sizes, p2p=p2p, p2p_seq=p2p_seq))

    stop = odd[0] if odd else None
    end_state = lambda seq: "started" if stop is not None and seq >= stop else "completed"
    add(1, "nccl:all_reduce", "completed")
    second = odd[1] if odd and odd[0] == 2 else ((2048,),)
    for sizes in (((1024,),), second, ((512,),)):
        add(2, "nccl:all_reduce", "scheduled", sizes)
    add(2, "nccl:coalesced", end_state(2), ())
    if stop == 2:
        return es
    for root in range(4):
        add(3, "nccl:_broadcast_oop", "scheduled", ((256 * (root + 1),),))
    add(3, "nccl:ALLGATHER_coalesced", "completed", ())
    add(4, "nccl:all_gather_into_tensor_coalesced", "completed", ((1024,), (2048,)))
    es[-1]["output_sizes"] = [[4096], [8192]]  # each input gathered from the 4 ranks
    nxt, prv = (rank + 1) % 4, (rank + 3) % 4
    add(0, f"nccl:send {rank}->{nxt}", "scheduled", p2p=True, p2p_seq=1)
    add(0, f"nccl:recv {rank}<-{prv}", "scheduled", p2p=True, p2p_seq=1)
    add(0, "nccl:coalesced", "completed", (), p2p=True, p2p_seq=1)
    add(5, "nccl:all_reduce", "completed")
    return es


def write(out, job, version, dumps, log, protocol=2):
    base = os.path.join(out, "nccl", job)
    for kind in ("pickle", "json"):
        os.makedirs(os.path.join(base, kind), exist_ok=True)
    for rank, d in dumps.items():
        with open(os.path.join(base, "pickle", f"nccl_trace_rank_{rank}"), "wb") as f:
            pickle.dump(d, f, protocol=protocol)
        with open(os.path.join(base, "json", f"nccl_trace_rank_{rank}.json"), "w") as f:
            json.dump(to_json(d), f)
    with open(os.path.join(base, "nccl.log"), "w") as f:
        f.write("\n".join(log) + "\n")


def init_lines(ranks):
    return [f"{HOSTS[r]}:{1000 + r}:{1100 + r} [{r % 2}] NCCL INFO comm 0x7f3c2c002f70 rank {r} nranks 4 "
            f"cudaDev {r % 2} busId {r % 2 + 1}a000 - Init COMPLETE" for r in ranks]


def timeout_lines(ranks, seq, optype="ALLREDUCE"):
    return [f"[rank{r}]:[E1206 10:00:0{r}.000000000 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={optype}, NumelIn=1024, "
            f"NumelOut=1024, Timeout(ms)=600000) ran for 600012 milliseconds before timing out." for r in ranks]


def main():
    out = sys.argv[1]
    # Every rank entered seq 7 and none completed it: the fabric, not the application.
    v = "2.10"
    write(out, "fabric", v, {r: dump(v, collectives(v, 7, "started"), 7) for r in range(4)},
          init_lines(range(4)) + timeout_lines(range(4), 7))
    # Healthy: every rank completed seq 7.
    write(out, "healthy", v, {r: dump(v, collectives(v, 7, "completed"), 7) for r in range(4)},
          init_lines(range(4)))
    # Rank 1 never entered seq 7 (protocol 4 pickles, dump version 2.4).
    v = "2.4"
    write(out, "skip", v, {r: dump(v, collectives(v, 7, "scheduled", skip_last=(r == 1)), 6 if r == 1 else 7)
                           for r in range(4)},
          init_lines(range(4)) + timeout_lines([0, 2, 3], 7), protocol=4)
    # Rank 3 died (CUDA OOM in its log, no dump); version 2.2, protocol 5.
    v = "2.2"
    write(out, "dead", v, {r: dump(v, collectives(v, 7, "scheduled"), 7) for r in range(3)},
          init_lines(range(4))
          + ["node-b:1003:1203 [1] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'"]
          + timeout_lines(range(3), 7), protocol=5)
    # P2P pipeline 0 -> 1 -> 2 -> 3 where rank 2 receives from 0 (group ranks = global here).
    v = "2.10"
    p2p = {0: [("nccl:send 0->1", "completed")], 1: [("nccl:recv 1<-0", "completed"), ("nccl:send 1->2", "started")],
           2: [("nccl:recv 2<-0", "started")], 3: [("nccl:recv 3<-2", "started")]}
    dumps = {}
    for r, ops in p2p.items():
        es = collectives(v, 3, "completed")
        for i, (op, st) in enumerate(ops):
            es.append(entry(v, len(es), 0, op, st, p2p=True, p2p_seq=i + 1))
        dumps[r] = dump(v, es, 3)
    write(out, "p2p", v, dumps, init_lines(range(4)))
    # A batch_isend_irecv ring (each rank sends to the next, receives from the previous)
    # where rank 2 receives from 0: every batch hangs (its end `started`, its ops
    # `scheduled`), the ends of one batch share a P2P sequence number.
    dumps = {}
    for r in range(4):
        es = collectives(v, 3, "completed")
        prv = 0 if r == 2 else (r + 3) % 4
        for op, st in ((f"nccl:send {r}->{(r + 1) % 4}", "scheduled"), (f"nccl:recv {r}<-{prv}", "scheduled"),
                       ("nccl:coalesced", "started")):
            es.append(entry(v, len(es), 0, op, st, () if op == "nccl:coalesced" else ((1024,),), p2p=True, p2p_seq=1))
        dumps[r] = dump(v, es, 3)
    write(out, "p2p_batch", v, dumps, init_lines(range(4)))
    # Coalescing blocks on every rank, alike: a healthy job (no verdict).
    write(out, "coalesced", v, {r: dump(v, coalesced_job(v, r), 5) for r in range(4)},
          init_lines(range(4)))
    # Rank 2's block at seq 2 holds a 4096-element all_reduce where the others hold 2048:
    # the block hangs on every rank (the same sequence number, a different call).
    write(out, "coalesced_mismatch", v,
          {r: dump(v, coalesced_job(v, r, (2, ((4096,),) if r == 2 else ((2048,),))), 2) for r in range(4)},
          init_lines(range(4)) + timeout_lines(range(4), 2, "COALESCED"))


if __name__ == "__main__":
    main()

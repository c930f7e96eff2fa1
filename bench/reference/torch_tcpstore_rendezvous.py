#!/usr/bin/env python3
"""PyTorch's TCPStore on bench/rendezvous_bench.cc's pattern, for the table in docs/performance.md.

N simulated ranks, one thread each, meet at one TCPStore server in a process of its own: connect, set
their own key (a 64-byte address), pass a barrier (add to a counter, the last arrival sets "done", every
rank waits for it), get rank 0's key. Wall time from the first connect to the last get, and the server's
peak resident memory (VmHWM). PyTorch's store has no authentication, so its connections skip the
handshake ours do. Debian's python3-torch (apt-get install -y python3-torch).

    python3 bench/reference/torch_tcpstore_rendezvous.py --ranks=256,1024,4096,8192
"""
import argparse
import json
import multiprocessing as mp
import resource
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def libuv_arg(use_libuv):
    """use_libuv exists from PyTorch 2.2 on; older ones (Debian 12's 1.13) have the thread-based server only."""
    if use_libuv is None:
        return {}
    return {"use_libuv": use_libuv}


def serve(port_queue, stop_event, use_libuv):
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=300), **libuv_arg(use_libuv))
    port_queue.put(store.port)
    stop_event.wait()


def peak_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def rendezvous(ranks, use_libuv):
    port_queue, stop = mp.Queue(), mp.Event()
    server = mp.Process(target=serve, args=(port_queue, stop, use_libuv))
    server.start()
    port = port_queue.get()
    stores = [None] * ranks
    failed = []
    slowest = [0.0]
    lock = threading.Lock()

    def rank_main(rank):
        try:
            began = time.monotonic()
            s = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=300),
                              **libuv_arg(use_libuv))
            took = time.monotonic() - began
            with lock:
                slowest[0] = max(slowest[0], took)
            stores[rank] = s
            s.set(f"rank/{rank}", f"10.0.{rank // 256}.{rank % 256}:{40000 + rank % 20000}".ljust(64, "a"))
            if s.add("init/arrived", 1) == ranks:
                s.set("init/done", "1")
            s.wait(["init/done"])
            s.get("rank/0")
        except Exception as e:  # noqa: BLE001 - reported in the table
            with lock:
                failed.append(f"rank {rank}: {e}")

    start = time.monotonic()
    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    result = {"bench": "rendezvous", "store": f"torch {torch.__version__}" + (" libuv" if use_libuv else ""),
              "ranks": ranks, "wall_s": wall, "slowest_connect_s": slowest[0],
              "server_peak_kib": peak_kib(server.pid), "server_threads": threads_of(server.pid),
              "failed": len(failed)}
    del stores
    stop.set()
    server.join()
    return result, failed[:1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", default="256,1024,4096,8192")
    parser.add_argument("--libuv", default="auto", choices=["auto", "yes", "no"],
                        help="the libuv server (PyTorch >= 2.2's default) or the older one")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    has_libuv = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 2)
    loops = {"auto": [True, False] if has_libuv else [None], "yes": [True], "no": [False]}[args.libuv]
    print(f"rendezvous through PyTorch {torch.__version__}'s TCPStore (loopback, no authentication), "
          f"RLIMIT_NOFILE {hard}")
    print(f"{'store':>14} {'ranks':>8} {'wall s':>10} {'slowest connect':>16} {'server peak MiB':>18} "
          f"{'server threads':>14} {'failed':>8}")
    lines = []
    for use_libuv in loops:
        for ranks in [int(r) for r in args.ranks.split(",") if r]:
            try:
                r, first = rendezvous(ranks, use_libuv)
            except Exception as e:  # noqa: BLE001 - e.g. an old torch without use_libuv
                print(f"  libuv={use_libuv}: {e}")
                break
            print(f"{'libuv' if use_libuv else 'poll loop':>14} {ranks:>8} {r['wall_s']:>10.2f} "
                  f"{r['slowest_connect_s']:>15.2f}s {r['server_peak_kib'] / 1024:>18.1f} "
                  f"{r['server_threads']:>14} {r['failed']:>8}", flush=True)
            for f in first:
                print(f"    first failure: {f}")
            lines.append(r)
    for line in lines:
        print(json.dumps(line))


if __name__ == "__main__":
    main()

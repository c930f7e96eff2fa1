#!/usr/bin/env python3
"""PyTorch's TCPStore (libuv backend, the default since 2.4) on bench/rendezvous_bench.cc's workload.

N simulated ranks in --processes client processes meet at one TCPStore server in a process of its own:

  connect       TCPStore(..., is_master=False): connect, PyTorch's own validation round trip
  publish       set "rank/<r>/addr" (64 bytes); rank 0 also sets the 128-byte "unique_id"
  barrier       add "barrier/arrived"; the last arrival sets "barrier/done"; every rank waits on it
  id broadcast  get "unique_id"

Each phase's time is when its last rank finished it minus when the previous phase's last rank finished
(time.monotonic_ns is CLOCK_MONOTONIC, the clock the C++ bench uses). Then the server's peak resident
memory (VmHWM) and CPU time. PyTorch's store has no authentication: its connections skip the handshake
ours do. A client process runs its ranks one after another (a PyTorch store call blocks its thread): each
connects, publishes and arrives; then each waits and gets, the first wait blocking until every process's
ranks have arrived. Destinations are spread over 127.0.0.0/8 (one address per 4,096 ranks; the server
listens on every interface) so the ephemeral ports of one address pair never run out.

    python3 bench/rendezvous_torch.py --ranks=1024,4096,16384 --processes=4
"""
import argparse
import json
import multiprocessing as mp
import os
import resource
import time
from datetime import timedelta

# PyTorch's client asks the resolver for its own socket's host name (for a log line); where no name server
# answers (the sandboxed build machine, hosts without a network) each unanswered query waits the resolver's
# timeout, 5 s by default. One try of 1 s keeps that out of the store's numbers as far as glibc allows.
os.environ.setdefault("RES_OPTIONS", "timeout:1 attempts:1")

import torch.distributed as dist  # noqa: E402 (after RES_OPTIONS)

PHASES = ["connect", "publish", "barrier", "id bcast"]
RANKS_PER_ADDRESS = 4096


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def libuv_arg(use_libuv):
    return {} if use_libuv is None else {"use_libuv": use_libuv}


def serve(port_queue, stop_event, use_libuv, timeout_s):
    raise_fd_limit()
    store = dist.TCPStore("0.0.0.0", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=timeout_s), **libuv_arg(use_libuv))
    port_queue.put(store.port)
    stop_event.wait()


def destination(rank):
    k = rank // RANKS_PER_ADDRESS
    return f"127.1.{k // 250}.{k % 250 + 1}"


def client(first, count, world, port, use_libuv, timeout_s, go, results, stop_event):
    raise_fd_limit()
    go.wait()
    ends = [0] * len(PHASES)
    failed, first_error = 0, ""
    stores = []
    timeout = timedelta(seconds=timeout_s)
    for rank in range(first, first + count):
        try:
            s = dist.TCPStore(destination(rank), port, is_master=False, wait_for_workers=False, timeout=timeout,
                              **libuv_arg(use_libuv))
            ends[0] = max(ends[0], time.monotonic_ns())
            s.set(f"rank/{rank}/addr", f"10.{rank >> 16}.{(rank >> 8) & 255}.{rank & 255}:29400/" + "a" * 40)
            if rank == 0:
                s.set("unique_id", b"\x5a" * 128)
            ends[1] = max(ends[1], time.monotonic_ns())
            if s.add("barrier/arrived", 1) == world:
                s.set("barrier/done", "1")
            stores.append(s)
        except Exception as e:  # noqa: BLE001 (the bench reports every failure)
            failed += 1
            first_error = first_error or f"rank {rank}: {e}"
    for s in stores:
        try:
            s.wait(["barrier/done"])
            ends[2] = max(ends[2], time.monotonic_ns())
        except Exception as e:  # noqa: BLE001
            failed += 1
            first_error = first_error or f"wait: {e}"
    for s in stores:
        try:
            if len(s.get("unique_id")) != 128:
                raise RuntimeError("the unique id came back with the wrong size")
            ends[3] = max(ends[3], time.monotonic_ns())
        except Exception as e:  # noqa: BLE001
            failed += 1
            first_error = first_error or f"get: {e}"
    results.put((ends, failed, first_error))
    stop_event.wait()  # every connection stays open until the server's memory is read


def proc_status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rendezvous(ranks, processes, use_libuv, timeout_s):
    ctx = mp.get_context("fork")
    port_queue, stop = ctx.Queue(), ctx.Event()
    server = ctx.Process(target=serve, args=(port_queue, stop, use_libuv, timeout_s))
    server.start()
    port = port_queue.get()
    processes = max(1, min(processes, ranks))
    go, results, hold = ctx.Event(), ctx.Queue(), ctx.Event()
    clients = []
    for p in range(processes):
        first, last = ranks * p // processes, ranks * (p + 1) // processes
        c = ctx.Process(target=client, args=(first, last - first, ranks, port, use_libuv, timeout_s, go, results, hold))
        c.start()
        clients.append(c)
    time.sleep(0.5)  # every client process is up and waiting
    cpu_before = cpu_seconds(server.pid)
    start = time.monotonic_ns()
    go.set()
    ends, failed, first_error = [0] * len(PHASES), 0, ""
    for _ in clients:
        e, f, err = results.get()
        ends = [max(a, b) for a, b in zip(ends, e)]
        failed += f
        first_error = first_error or err
    phases, previous = [], start
    for end in ends:
        phases.append(max(0, end - previous) / 1e9)
        previous = max(previous, end)
    r = {"bench": "rendezvous", "store": "pytorch-libuv" if use_libuv else "pytorch", "ranks": ranks,
         "processes": processes, "connect_s": phases[0], "publish_s": phases[1], "barrier_s": phases[2],
         "id_broadcast_s": phases[3], "total_s": (previous - start) / 1e9,
         "server_peak_kib": proc_status(server.pid, "VmHWM:"), "server_cpu_s": cpu_seconds(server.pid) - cpu_before,
         "server_threads": proc_status(server.pid, "Threads:"), "failed": failed}
    hold.set()
    for c in clients:
        c.join()
    stop.set()
    server.join()
    return r, first_error


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", default="1024,2048,4096,8192")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--timeout_s", type=int, default=300)
    parser.add_argument("--backend", choices=["libuv", "legacy"], default="libuv")
    args = parser.parse_args()
    import torch
    hard = raise_fd_limit()
    use_libuv = args.backend == "libuv"
    print(f"rendezvous through PyTorch {torch.__version__}'s TCPStore ({args.backend}; no authentication; "
          f"loopback), {args.processes} client processes; RLIMIT_NOFILE {hard} (hard)")
    print(f"{'ranks':>8} {PHASES[0]:>13} {PHASES[1]:>9} {PHASES[2]:>9} {PHASES[3]:>9} {'total s':>9} "
          f"{'server MiB':>11} {'server CPU s':>13} {'threads':>8} {'failed':>9}", flush=True)
    lines = []
    for field in args.ranks.split(","):
        ranks = int(field)
        if ranks + 64 > hard:
            print(f"{ranks:>8}   skipped: the server needs {ranks + 64} descriptors, over the hard limit {hard}")
            continue
        r, first_error = rendezvous(ranks, args.processes, use_libuv, args.timeout_s)
        print(f"{ranks:>8} {r['connect_s']:>12.2f}s {r['publish_s']:>8.2f}s {r['barrier_s']:>8.2f}s "
              f"{r['id_broadcast_s']:>8.2f}s {r['total_s']:>9.2f} {r['server_peak_kib'] / 1024:>11.1f} "
              f"{r['server_cpu_s']:>13.2f} {r['server_threads']:>8} {r['failed']:>9}", flush=True)
        if first_error:
            print(f"    first failure: {first_error}", flush=True)
        lines.append(r)
    for r in lines:
        print(json.dumps(r))


if __name__ == "__main__":
    main()

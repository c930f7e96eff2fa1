"""tinyddp against PyTorch on CPU: the DDP training step over Gloo, same workload, same run.

    /usr/bin/python3 bench/reference/cpu_vs_torch.py                 # 2 ranks, 784-512-512-10, batch 64
    /usr/bin/python3 bench/reference/cpu_vs_torch.py --rounds=9 --rt  # on a machine other jobs share

Each round runs //bench:ddp_step_bench and bench/reference/torch_ddp_step.py --device=cpu once each, in
alternating order, every rank started the same way by this script (RANK, WORLD_SIZE, MASTER_ADDR/PORT;
OMP_NUM_THREADS=1, and torch.set_num_threads(1) in the script, since each tinyddp rank computes on one
thread). Before each run it waits for the CPUs to be idle (--idle); --pin puts rank r on core r with
taskset and --rt runs every rank under SCHED_FIFO, for both alike. It prints every round, then the median
of the rounds for each and the ratios PyTorch / tinyddp, of the wall clock and of the CPU time per step
(rank 0's process, all threads: the figure other jobs on a shared machine disturb least), with the
instruction set tinyddp's CPU kernels ran (TINYDDP_CPU_ISA caps it) and the BLAS PyTorch loaded. Needs
Debian's python3-torch (gloo) with libopenblas0-pthread: without it Debian's torch runs on netlib's
reference BLAS, ~2x slower, an unfair comparison (the script says so). Use /usr/bin/python3 (Debian's
torch). PyTorch is a reference here, never part of the product.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_times():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]  # total, idle + iowait


def wait_for_idle(fraction, window_s, max_wait_s):
    """Waits until the machine was at least `fraction` idle over `window_s`; returns the idle fraction seen
    (a shared machine's other jobs would otherwise decide the numbers). Gives up after max_wait_s."""
    deadline = time.monotonic() + max_wait_s
    while True:
        total0, idle0 = cpu_times()
        time.sleep(window_s)
        total1, idle1 = cpu_times()
        seen = (idle1 - idle0) / max(1, total1 - total0)
        if seen >= fraction or time.monotonic() > deadline:
            return seen


def run_ranks(argv, nproc, pin, rt, timeout_s):
    """Starts nproc ranks of argv as a torchrun-style job on this machine; returns rank 0's JSON line."""
    port = free_port()
    procs = []
    for rank in range(nproc):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
                   LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        cmd = ((["taskset", "-c", str(rank % os.cpu_count())] if pin else []) + (["chrt", "-f", "10"] if rt else [])
               + argv)
        procs.append(subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            sys.exit(f"cpu_vs_torch: {argv[0]} did not finish in {timeout_s} s")
        if p.returncode != 0:
            sys.exit(f"cpu_vs_torch: {' '.join(argv)} failed (exit {p.returncode}):\n{err[-3000:]}")
        outs.append(out)
    for line in outs[0].splitlines():
        if line.startswith("{"):
            return json.loads(line)
    sys.exit(f"cpu_vs_torch: no JSON line from rank 0 of {' '.join(argv)}:\n{outs[0]}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dims", default="784,512,512,10")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--pin", action="store_true", help="taskset rank r to core r (both implementations)")
    p.add_argument("--rt", action="store_true",
                   help="run every rank under SCHED_FIFO (chrt -f 10, root): other jobs on a shared machine cannot "
                        "preempt it. FIFO threads of one rank do not time-slice among themselves either, so "
                        "communication overlaps compute less than under the normal scheduler")
    p.add_argument("--bench", default=os.path.join(REPO, "bazel-bin/bench/ddp_step_bench"),
                   help="the ddp_step_bench binary (./bazelw build -c opt //bench:ddp_step_bench)")
    p.add_argument("--no_build", action="store_true", help="use --bench as it is")
    p.add_argument("--timeout_s", type=int, default=600)
    p.add_argument("--idle", type=float, default=0.95,
                   help="before each run, wait until the CPUs were this idle for 1 s (0: do not wait); on a "
                        "machine others share, their jobs would otherwise be measured too")
    p.add_argument("--max_wait_s", type=float, default=300, help="run anyway after waiting this long for --idle")
    args = p.parse_args()

    if not args.no_build:
        subprocess.run([os.path.join(REPO, "bazelw"), "build", "-c", "opt", "//bench:ddp_step_bench"], cwd=REPO,
                       check=True, stdout=subprocess.DEVNULL)
    common = [f"--dims={args.dims}", f"--batch={args.batch}", f"--steps={args.steps}", f"--warmup={args.warmup}"]
    ours = [os.path.realpath(args.bench)] + common + ["--backend=gloo"]
    theirs = ["/usr/bin/python3", os.path.join(REPO, "bench/reference/torch_ddp_step.py"), "--device=cpu"] + common

    print(f"# DDP step, {args.nproc} Gloo ranks on {os.cpu_count()} CPUs, dims {args.dims}, batch {args.batch} "
          f"per rank, {args.steps} steps after {args.warmup}, {args.rounds} rounds{', pinned' if args.pin else ''}")
    if args.idle > 0:
        print(f"# each run starts once the CPUs were {args.idle:.0%} idle for a second (--idle)")
    print(f"# {'':5}  {'tinyddp (ms/step)':^26}  {'pytorch (ms/step)':^26}  {'pytorch / tinyddp':^17}")
    print(f"# {'round':>5}  {'median':>8} {'burst':>8} {'CPU':>8}  {'median':>8} {'burst':>8} {'CPU':>8}  "
          f"{'median':>8} {'CPU':>8}")
    rows = {"tinyddp": [], "pytorch": []}
    for r in range(args.rounds):
        order = [("tinyddp", ours), ("pytorch", theirs)]
        if r % 2:
            order.reverse()  # neither always runs first
        got, idle = {}, []
        for name, argv in order:
            if args.idle > 0:
                idle.append(wait_for_idle(args.idle, 1.0, args.max_wait_s))
            got[name] = run_ranks(argv, args.nproc, args.pin, args.rt, args.timeout_s)
        for name in rows:
            rows[name].append(got[name])
        t, q = got["tinyddp"], got["pytorch"]
        t_cpu = t.get("cpu_ms_per_step", float("nan"))  # nan for a binary too old to report it
        q_cpu = q.get("cpu_ms_per_step", float("nan"))
        print(f"  {r + 1:>5}  {t['step_ms_median_synced']:8.3f} {t['step_ms_burst']:8.3f} {t_cpu:8.3f}  "
              f"{q['step_ms_median_synced']:8.3f} {q['step_ms_burst']:8.3f} {q_cpu:8.3f}  "
              f"{q['step_ms_median_synced'] / t['step_ms_median_synced']:7.2f}x {q_cpu / t_cpu:7.2f}x"
              f"{'  idle before: ' + ', '.join(f'{x:.0%}' for x in idle) if idle else ''}", flush=True)

    def med(name, key):  # nan for a binary too old to report `key`
        return statistics.median(row.get(key, float("nan")) for row in rows[name])

    t_med, q_med = med("tinyddp", "step_ms_median_synced"), med("pytorch", "step_ms_median_synced")
    t_burst, q_burst = med("tinyddp", "step_ms_burst"), med("pytorch", "step_ms_burst")
    t_cpu, q_cpu = med("tinyddp", "cpu_ms_per_step"), med("pytorch", "cpu_ms_per_step")
    last_t, last_q = rows["tinyddp"][-1], rows["pytorch"][-1]
    blas = last_q.get("blas", [])
    print(f"tinyddp ({last_t.get('cpu_isa', '?')} CPU kernels): median {t_med:.3f} ms/step, burst {t_burst:.3f}, "
          f"CPU {t_cpu:.3f} per rank")
    print(f"pytorch {last_q['torch']} ({', '.join(blas) or 'no BLAS library found'}): median {q_med:.3f} ms/step, "
          f"burst {q_burst:.3f}, CPU {q_cpu:.3f} per rank")
    print(f"pytorch / tinyddp (medians of {args.rounds} rounds): {q_med / t_med:.2f}x wall clock (median step), "
          f"{q_burst / t_burst:.2f}x (burst), {q_cpu / t_cpu:.2f}x CPU time")
    if not any("openblas" in b for b in blas):
        print("WARNING: PyTorch did not load OpenBLAS (apt-get install libopenblas0-pthread): it is running on a "
              "slow BLAS and this comparison flatters tinyddp")
    print(json.dumps({"bench": "cpu_vs_torch", "dims": args.dims, "batch": args.batch, "world": args.nproc,
                      "pinned": args.pin, "rt": args.rt, "rounds": args.rounds, "cpu_isa": last_t.get("cpu_isa"),
                      "torch": last_q["torch"], "blas": blas, "tinyddp_ms": round(t_med, 3),
                      "pytorch_ms": round(q_med, 3), "tinyddp_burst_ms": round(t_burst, 3),
                      "pytorch_burst_ms": round(q_burst, 3), "tinyddp_cpu_ms": round(t_cpu, 3),
                      "pytorch_cpu_ms": round(q_cpu, 3), "ratio": round(q_med / t_med, 2),
                      "ratio_cpu": round(q_cpu / t_cpu, 2)}))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Goodput against the mean time between failures: restart the world vs recover in place (the cost model of
docs/fault_tolerance.md), with the recovery costs measured by bench/recovery_session.sh plugged in.

Restart the world (torchelastic, --max_restarts): every failure stops every rank, which restart (R seconds:
re-launch, rendezvous, communicator init, checkpoint load) and redo the work since the last checkpoint, on
average half the checkpoint interval tau; each checkpoint costs delta seconds of training. With Young's
interval tau = sqrt(2 * delta * M):
    waste = delta / tau + (R + tau / 2) / M
In place (--min_replicas): a failure costs the survivors r seconds (detect, agree, regroup, redo the step),
and the job runs one replica short until a replacement rejoins S seconds later (a fraction 1/replicas of its
throughput), and checkpoints are only for what in place cannot survive (the store's host), written every
`rare_checkpoint` seconds:
    waste = (r + S / replicas) / M + delta / rare_checkpoint
Goodput = 1 - waste (the fraction of the machine's time that trains). The mean time between failures of the
whole job at N GPUs comes from three published points (7.9 h at 1,024 GPUs, 1.8 h at 16,384, about 14 min at
131,072: "Revisiting Reliability", as cited by the Clockwork benchmark), interpolated log-log.

  bench/goodput_model.py --restart_s=10.6 --in_place_s=2.2        # the 4-rank CPU medians of 2026-12-06
  bench/goodput_model.py --restart_s=... --checkpoint_s=30 --gpus_per_replica=8 --json
"""
import argparse
import json
import math

ANCHORS = [(1024, 7.9 * 3600), (16384, 1.8 * 3600), (131072, 14 * 60)]


def mtbf_seconds(gpus):
    """The job's mean time between failures at `gpus`, log-log between the anchors (extrapolated at the ends)."""
    pts = ANCHORS
    i = 0 if gpus <= pts[1][0] else 1
    (x0, y0), (x1, y1) = pts[i], pts[i + 1]
    slope = (math.log(y1) - math.log(y0)) / (math.log(x1) - math.log(x0))
    return math.exp(math.log(y0) + slope * (math.log(gpus) - math.log(x0)))


def restart_goodput(mtbf, restart, delta):
    tau = math.sqrt(2 * delta * mtbf)
    waste = delta / tau + (restart + tau / 2) / mtbf
    return max(0.0, 1 - waste), tau


def in_place_goodput(mtbf, recover, rejoin, replicas, delta, rare):
    waste = (recover + rejoin / replicas) / mtbf + delta / rare
    return max(0.0, 1 - waste)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--restart_s", type=float, required=True, help="measured: failure -> next step, restart")
    p.add_argument("--in_place_s", type=float, required=True, help="measured: failure -> next step, in place")
    p.add_argument("--rejoin_s", type=float, default=None,
                   help="a replacement's time to rejoin (default: --restart_s, a new process's start and rendezvous)")
    p.add_argument("--checkpoint_s", type=float, default=30.0, help="one checkpoint's cost in training time")
    p.add_argument("--rare_checkpoint_s", type=float, default=6 * 3600.0,
                   help="in place: the checkpoint interval kept for what it cannot survive")
    p.add_argument("--gpus_per_replica", type=int, default=8, help="a data-parallel replica (TP/PP inside it)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    rejoin = a.restart_s if a.rejoin_s is None else a.rejoin_s
    print(f"restart R = {a.restart_s} s, in place r = {a.in_place_s} s, rejoin S = {rejoin} s, checkpoint "
          f"delta = {a.checkpoint_s} s, {a.gpus_per_replica} GPUs per replica")
    print(f"{'GPUs':>8} {'MTBF':>9} {'restart: tau*':>14} {'goodput':>9} {'in place: goodput':>18} {'lost/day restart':>17} {'in place':>9}")
    rows = []
    for gpus in [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]:
        m = mtbf_seconds(gpus)
        g_r, tau = restart_goodput(m, a.restart_s, a.checkpoint_s)
        g_i = in_place_goodput(m, a.in_place_s, rejoin, gpus // a.gpus_per_replica, a.checkpoint_s, a.rare_checkpoint_s)
        rows.append({"gpus": gpus, "mtbf_h": round(m / 3600, 3), "restart_tau_min": round(tau / 60, 1),
                     "restart_goodput": round(g_r, 4), "in_place_goodput": round(g_i, 4)})
        print(f"{gpus:>8} {m / 3600:>7.2f} h {tau / 60:>10.1f} min {100 * g_r:>8.2f}% {100 * g_i:>17.2f}%"
              f" {24 * (1 - g_r):>15.2f} h {24 * (1 - g_i):>7.2f} h")
    if a.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Times one failure of a ddp_mlp job from the outside: failure -> first completed step after it.

Runs the command, stamps each line of its output (stdout and stderr merged) with a monotonic clock, and finds
  the failure:   the fault injection's line ("fault injection (...): rank R, step K: kill" or ": stop"), printed
                 and flushed by the victim right before it SIGKILLs (or SIGSTOPs) itself;
  the first completed step after it:
    --mode=in_place  the first "step N" line after the "in-place recovery: generation" line (ddp_mlp prints
                     one per completed step with --log_every=1);
    --mode=restart   the line "checkpoint: .../step-<K+1>" (--checkpoint_every=1: written right after step K
                     completes in the restarted round; it includes one checkpoint write, see docs/performance.md).
Prints one JSON line: {"mode", "recovery_s", "total_s", "exit_code", "phases"}; recovery_s is null when a mark is
missing. The phases: in place, what the lead printed (detect, regroup = quorum + new group, state = live state +
DDP); restart, from the launcher's lines (stop: failure -> "round 0 failed"; start: -> "resumed from", the new
workers' start, rendezvous, setup and checkpoint load; step: -> the first step's checkpoint line).

  bench/recovery_clock.py --mode=in_place -- ddp_mlp --nproc=4 --min_replicas=2 ...   (TINYDDP_FAULT set)
"""
import argparse
import json
import re
import subprocess
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["in_place", "restart"], required=True)
    parser.add_argument("--log", help="write the stamped output here")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command and args.command[0] == "--" else args.command
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    failed_at = recovered_at = None
    failed_step = None
    regrouped = False
    phases = {}
    marks = {}
    log = open(args.log, "w") if args.log else None
    for line in proc.stdout:
        now = time.monotonic()
        if log:
            log.write(f"{now - start:10.4f} {line}")
        if failed_at is None:
            m = re.search(r"fault injection \(.*\): rank \d+, step (\d+): (kill|stop)", line)
            if m:
                failed_at, failed_step = now, int(m.group(1))
            continue
        m = re.search(r"detected ([0-9.]+) s after the failed step began, regrouped in ([0-9.]+) s, state adopted in "
                      r"([0-9.]+) s", line)
        if m and "detect_s" not in phases:
            phases.update(detect_s=float(m.group(1)), regroup_s=float(m.group(2)), state_s=float(m.group(3)))
        if "round 0 failed" in line and "stopped" not in marks:
            marks["stopped"] = now
        if "resumed from" in line and "started" not in marks:
            marks["started"] = now
        if recovered_at is not None:
            continue
        if args.mode == "in_place":
            if "in-place recovery: generation" in line:
                regrouped = True
            elif regrouped and re.match(r"step \d+ ", line):
                recovered_at = now
        elif re.search(r"checkpoint: .*step-0*%d$" % (failed_step + 1), line.rstrip()):
            recovered_at = now
    code = proc.wait()
    total = time.monotonic() - start
    if args.mode == "restart" and recovered_at is not None and len(marks) == 2:
        phases = {"stop_s": round(marks["stopped"] - failed_at, 3),
                  "start_s": round(marks["started"] - marks["stopped"], 3),
                  "step_s": round(recovered_at - marks["started"], 3)}
    result = {"mode": args.mode, "recovery_s": None if recovered_at is None else round(recovered_at - failed_at, 3),
              "total_s": round(total, 3), "exit_code": code, "phases": phases}
    print(json.dumps(result))
    return 0 if code == 0 and recovered_at is not None else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Times one failure of a ddp_mlp job from the outside: failure -> first completed step after it.

Runs the command, stamps each line of its output (stdout and stderr merged) with a monotonic clock, and finds
  the failure:   the fault injection's line ("fault injection (...): rank R, step K: kill"), printed and flushed
                 by the victim right before it SIGKILLs itself;
  the first completed step after it:
    --mode=in_place  the first "step N" line after the "in-place recovery: generation" line (ddp_mlp prints
                     one per completed step with --log_every=1);
    --mode=restart   the line "checkpoint: .../step-<K+1>" (--checkpoint_every=1: written right after step K
                     completes in the restarted round; it includes one checkpoint write, see docs/performance.md).
Prints one JSON line: {"mode", "recovery_s", "total_s", "exit_code"}; recovery_s is null when a mark is missing.

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
    log = open(args.log, "w") if args.log else None
    for line in proc.stdout:
        now = time.monotonic()
        if log:
            log.write(f"{now - start:10.4f} {line}")
        if failed_at is None:
            m = re.search(r"fault injection \(.*\): rank \d+, step (\d+): kill", line)
            if m:
                failed_at, failed_step = now, int(m.group(1))
            continue
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
    result = {"mode": args.mode, "recovery_s": None if recovered_at is None else round(recovered_at - failed_at, 3),
              "total_s": round(total, 3), "exit_code": code}
    print(json.dumps(result))
    return 0 if code == 0 and recovered_at is not None else 1


if __name__ == "__main__":
    sys.exit(main())

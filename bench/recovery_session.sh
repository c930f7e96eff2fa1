#!/usr/bin/env bash
# Recovery time on one job, both ways: a rank SIGKILLed mid-epoch, then (a) in place (--min_replicas: the
# survivors agree, rebuild their Gloo group and redo the step; dist/elastic/in_place) and (b) restart the world
# (--max_restarts=1 from the checkpoint of the step before: every worker stopped, started again, rendezvous,
# checkpoint load). Measured from outside (bench/recovery_clock.py): the failure's line -> the first completed
# step after it. Gloo CPU ranks, no GPU used; here 4 ranks, on the GPU machine's 16-core host 8 and 16:
#
#   bench/recovery_session.sh bazel-bin/examples 4                         # here (the binary from Bazel)
#   tools/gpu_bundle.sh -o .rec --pack //examples:ddp_mlp                  # here, for there
#   cp bench/recovery_session.sh bench/recovery_clock.py .rec/             # carry .rec (or .rec.tar.xz) over
#   .rec/recovery_session.sh .rec/bin "8 16" [REPEATS]                     # there; prints the table
#
# The job: the tiny workload (MLP 784-512-512-10, batch 64 per rank) on synthetic data, 14 steps, rank 1 killed
# before step 8 (SIGKILL), and in place also frozen (SIGSTOP, detected by --timeout=5s, then the quorum's
# --recovery_window=2 for the frozen one). The restart's checkpoint is every step, its best case (no work lost).
set -uo pipefail
bin=$(cd "${1:?usage: recovery_session.sh BIN_DIR [RANKS] [REPEATS]}" && pwd)
ranks=${2:-4}
repeats=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
[[ -d $bin/../lib ]] && export LD_LIBRARY_PATH=$bin/../lib:${LD_LIBRARY_PATH:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== $(date -u +%FT%TZ) $(hostname): $(nproc) cores; ddp_mlp at $bin"
job=(--backend=gloo --dataset=synthetic --synthetic_examples=20000 --hidden=512,512 --batch_size=64
     --max_steps=14 --log_every=1 --timeout=30s)
fault="rank=1,step=8,action=kill"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-6s  %-42s  %-24s  %s\n" ranks mechanism "failure -> next step (s)" "runs"
for n in $ranks; do
  for mode in "in_place kill" "in_place stop" "restart kill"; do
    set -- $mode
    times=()
    for ((r = 0; r < repeats; ++r)); do
      rm -rf "$work/ck"
      if [[ $1 == in_place && $2 == stop ]]; then
        extra=(--min_replicas=$((n / 2)) --timeout=5s)
      elif [[ $1 == in_place ]]; then
        extra=(--min_replicas=$((n / 2)))
      else
        extra=(--max_restarts=1 --checkpoint_dir="$work/ck" --checkpoint_every=1)
      fi
      line=$(TINYDDP_FAULT=${fault/kill/$2} python3 "$here/recovery_clock.py" --mode="$1" --log="$work/log.$n.$1.$r" -- \
             "$bin/ddp_mlp" --nproc="$n" "${job[@]}" "${extra[@]}" | tail -1)
      t=$(python3 -c 'import json,sys; v=json.loads(sys.argv[1])["recovery_s"]; print("fail" if v is None else v)' "$line")
      echo "$line" >> "$work/runs"
      times+=("$t")
      [[ $t == fail ]] && tail -20 "$work/log.$n.$1.$r"
    done
    what="restart the world (checkpoint each step)"
    [[ $1 == in_place ]] && what="in place, a rank $( [[ $2 == kill ]] && echo killed || echo "frozen, --timeout=5s")"
    sorted=$(printf "%s\n" "${times[@]}" | sort -g | tr '\n' ' ')
    median=$(printf "%s\n" "${times[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    printf "%-6s  %-42s  %-24s  %s\n" "$n" "$what" "$median (median)" "$sorted"
    echo "{\"ranks\": $n, \"mechanism\": \"$1 $2\", \"recovery_s\": [$(IFS=,; echo "${times[*]}")]}" >> "$work/json"
  done
done
cat "$work/json"
echo "== each run, with its phases (in place: detect, regroup, state; restart: stop, start, step)"
cat "$work/runs"

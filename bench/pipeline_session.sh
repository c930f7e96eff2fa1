#!/usr/bin/env bash
# Pipeline bubbles at p = 2, 4 and 8 on one machine's CPU cores (the GPU machine's 16-core host; no GPU is used):
# bench/pipeline_bench with Gloo ranks, one per core, every schedule and m in {1, 2, 4, 8, 16}, each table with
# its JSON lines, and the measured picture of each p. Built here, run there:
#
#   tools/gpu_bundle.sh -o .pp --pack //bench:pipeline_bench          # here (Bazel)
#   cp bench/pipeline_session.sh .pp/                                  # carry .pp (or .pp.tar.xz) over
#   .pp/pipeline_session.sh .pp OUT [P_LIST] [STEPS]                   # there; tables on stdout, JSON/SVG in OUT
#
# p ranks need p free cores: the script refuses a p above the host's cores. The rows of docs/performance.md
# ("Pipeline bubbles, measured") name the machine that gave them; this script prints it first.
set -uo pipefail
dir=$(cd "${1:?usage: pipeline_session.sh BUNDLE_DIR OUT [P_LIST] [STEPS]}" && pwd)
out=${2:?usage: pipeline_session.sh BUNDLE_DIR OUT [P_LIST] [STEPS]}
ps=${3:-2,4,8}
steps=${4:-20}
mkdir -p "$out"
export LD_LIBRARY_PATH=$dir/lib:${LD_LIBRARY_PATH:-}
unset TINYDDP_NPROC
cores=$(nproc)
echo "== $(date -u +%FT%TZ) $(hostname): $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg)"
for p in ${ps//,/ }; do
  if (( p > cores )); then echo "== p=$p: skipped, $cores cores (one rank per core)"; continue; fi
  # Interleaved needs layers divisible by p*v (v=2): 2p Linears at least; 16 Linears covers p = 2, 4, 8.
  echo "== p=$p: bench/pipeline_bench --pp=$p --layers=16 --width=512 --rows=32 --steps=$steps"
  "$dir/bin/pipeline_bench" --pp="$p" --layers=16 --width=512 --rows=32 --steps="$steps" \
      --microbatches=1,2,4,8,16 --schedules=gpipe,1f1b,interleaved,zb --virtual_stages=2 \
      --json="$out/pipeline_p$p.jsonl" --svg="$out/pipeline_p$p.svg" --svg_microbatches=8
done
echo "== done: $(ls "$out")"

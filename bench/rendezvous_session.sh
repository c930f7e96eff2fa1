#!/usr/bin/env bash
# The rendezvous at 1K..98K ranks on one machine (the GPU machine's 16-core host; no GPU is used): tinyddp's
# store (bench/rendezvous_bench) and PyTorch's libuv TCPStore (bench/rendezvous_torch.py) on the same
# workload, in one call, then the store under 1,000 strangers' connects. Built here, run there:
#
#   tools/gpu_bundle.sh -o .rdv --pack //bench:rendezvous_bench          # here (Bazel)
#   cp bench/rendezvous_session.sh bench/rendezvous_torch.py .rdv/        # carry .rdv (or .rdv.tar.xz) over
#   .rdv/rendezvous_session.sh .rdv [RANKS] [PROCESSES]                   # there; prints both tables
#
# Each rank holds a descriptor in the server's process: 98,304 ranks need RLIMIT_NOFILE's hard limit over
# 98,400. The script prints the host's limits, raises the soft limit to the hard one (and, as root, the
# hard one to 1,048,576 if lower) and says which rank counts it skips.
set -uo pipefail
dir=$(cd "${1:?usage: rendezvous_session.sh BUNDLE_DIR [RANKS] [PROCESSES]}" && pwd)
ranks=${2:-1024,2048,4096,8192,16384,19456,32768,65536,98304}
procs=${3:-12}
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$dir/lib:${LD_LIBRARY_PATH:-}

echo "== $(date -u +%FT%TZ) $(hostname): $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB"
echo "fd limit soft $(ulimit -Sn) hard $(ulimit -Hn); fs.nr_open $(cat /proc/sys/fs/nr_open);" \
     "fs.file-max $(cat /proc/sys/fs/file-max); somaxconn $(cat /proc/sys/net/core/somaxconn);" \
     "tcp_max_syn_backlog $(cat /proc/sys/net/ipv4/tcp_max_syn_backlog); ports $(cat /proc/sys/net/ipv4/ip_local_port_range)"
if (( $(ulimit -Hn) < 100000 )) && [[ $(id -u) == 0 ]]; then ulimit -Hn 1048576 2>/dev/null || echo "could not raise the hard limit"; fi
ulimit -Sn "$(ulimit -Hn)"
echo "fd limit now soft $(ulimit -Sn) hard $(ulimit -Hn)"
python3 -c 'import torch; print("PyTorch", torch.__version__)' || echo "no PyTorch: its rows are skipped"

echo "== tinyddp: bench/rendezvous_bench --ranks=$ranks --processes=$procs"
"$dir/bin/rendezvous_bench" --ranks="$ranks" --processes="$procs"
echo "== PyTorch libuv TCPStore: bench/rendezvous_torch.py --ranks=$ranks --processes=$procs"
python3 "$here/rendezvous_torch.py" --ranks="$ranks" --processes="$procs"
echo "== tinyddp under 1,000 strangers' connects: --ranks=4096 --strangers=1000"
"$dir/bin/rendezvous_bench" --ranks=4096 --strangers=1000 --processes="$procs"

#!/bin/bash
# ddp_mlp under Open MPI's mpirun, one rank per GPU on every host of a host file. mpirun tells each rank
# its rank and local rank (OMPI_COMM_WORLD_*), but not where rank 0 runs: the store's address goes to
# every rank with -x, and so does the job secret. Explained in docs/clusters.md.
#
#   examples/cluster/mpirun.sh hosts.txt [ddp_mlp flags]    # hosts.txt: "gpu01 slots=8", one host a line
#
# --map-by slot fills each host's slots before the next (ranks 0-7 on the first host, ...), which is how
# tinyddp numbers nodes (rank / ranks per host); rank 0, and so the store, is on the file's first host.
# On one host, MPICH's and Intel MPI's mpiexec take the same variables with -genv NAME VALUE.
set -euo pipefail
hostfile=${1:?usage: mpirun.sh HOSTFILE [ddp_mlp flags]}
shift
export MASTER_ADDR=${MASTER_ADDR:-$(awk 'NF && $1 !~ /^#/ { print $1; exit }' "$hostfile")}
export MASTER_PORT=${MASTER_PORT:-29500}
export TINYDDP_STORE_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
# Ranks: the sum of the slots (1 for a host without slots=).
ranks=$(awk 'NF && $1 !~ /^#/ { n = 1; for (i = 2; i <= NF; i++) if ($i ~ /^slots=/) n = substr($i, 7); s += n }
             END { print s }' "$hostfile")

mpirun --hostfile "$hostfile" -np "$ranks" --map-by slot --bind-to none \
  -x MASTER_ADDR -x MASTER_PORT -x TINYDDP_STORE_SECRET -x OMP_NUM_THREADS=8 \
  "${TINYDDP_PROGRAM:-bazel-bin/examples/ddp_mlp}" --backend=nccl "$@"

#!/usr/bin/env bash
# install_cluster_engines.sh: installs the job engines that tests/cluster/ run tinyddp under, from
# Debian's packages: Slurm 22.05 (slurm-wlm: slurmctld, slurmd, srun, sbatch), MUNGE (Slurm's
# authentication daemon) and Open MPI 4.1 (mpirun).
#
#   tools/install_cluster_engines.sh        # CI runs it before ./bazelw test //...
#
# Idempotent: when every engine is already there it says so and does nothing. It installs packages
# only; it starts no daemon, and writes no configuration (the packages' own files aside). Every
# test starts its own munged, slurmctld and slurmd with a configuration in its temporary folder and
# stops them (tests/cluster/slurm_cluster.h), so nothing here touches a real cluster.
# Without root (or password-less sudo) it says what to install and exits 1; the tests then report
# themselves as skipped, with the reason.
set -euo pipefail

# package      file that proves it is installed
needs=(
  "slurm-wlm   /usr/sbin/slurmctld"
  "slurm-wlm   /usr/sbin/slurmd"
  "slurm-wlm   /usr/bin/srun"
  "munge       /usr/sbin/munged"
  "openmpi-bin /usr/bin/mpirun"
)
missing=()
for n in "${needs[@]}"; do
  read -r pkg file <<<"$n"
  [[ -e $file ]] || [[ " ${missing[*]} " == *" $pkg "* ]] || missing+=("$pkg")
done
if (( ${#missing[@]} == 0 )); then
  echo "install_cluster_engines: slurm-wlm, munge and openmpi-bin are installed"
  exit 0
fi

sudo=""
if (( EUID != 0 )); then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo="none"; fi
fi
if ! command -v apt-get >/dev/null || [[ $sudo == none ]]; then
  echo "install_cluster_engines: this machine cannot install ${missing[*]} (no apt-get, or not root)." >&2
  echo "  Install them by hand (Debian 12 / Ubuntu: sudo apt-get install --no-install-recommends ${missing[*]});" >&2
  echo "  until then tests/cluster/ reports its tests as skipped." >&2
  exit 1
fi

echo "install_cluster_engines: installing ${missing[*]} with apt-get (tests/cluster/ runs tinyddp under them)"
export DEBIAN_FRONTEND=noninteractive
# The packages' install scripts would start munged, slurmctld and slurmd as system services; the tests
# want none of those (they start their own). Debian's policy-rc.d convention says "do not start
# services" when it exits 101; a container usually has one already. Ours is removed afterwards.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\n# install_cluster_engines.sh: start no service while installing\nexit 101\n' |
    $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  own_policy=1
fi
log=$(mktemp /tmp/install_cluster_engines.XXXXXX.log)
finish() {
  if (( own_policy )); then $sudo rm -f "$policy"; fi
}
trap finish EXIT

install() { $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$log" 2>&1; }
if ! install; then
  # A fresh machine's package lists may be missing or stale: refresh them once and try again.
  $sudo apt-get update -qq >>"$log" 2>&1 || true
  if ! install; then
    echo "install_cluster_engines: apt-get install failed; its log is $log. Install by hand:" >&2
    echo "  apt-get install --no-install-recommends ${missing[*]}" >&2
    tail -5 "$log" >&2
    exit 1
  fi
fi
rm -f "$log"
versions=()
for p in "${missing[@]}"; do versions+=("$p $(dpkg-query -W -f='${Version}' "$p" 2>/dev/null)"); done
echo "install_cluster_engines: installed $(IFS=,; echo "${versions[*]}" | sed 's/,/, /g')"

#!/usr/bin/env bash
# Runs the tests of a bundle (tools/gpu_bundle.sh) on a machine without Bazel, giving each what Bazel's
# test environment would, and ends with the same line as .ci/run:
#
#   run_gpu_tests.sh BUNDLE [OUT] [NAME...]     # NAME: e.g. process_group_nccl_test (default: every one)
#   ...
#   tests: N passed, M failed, K skipped
#
# Every BUNDLE/bin/*_test runs once, alone (multi-GPU tests must not share GPUs), with
#   TEST_TMPDIR      OUT/NAME/tmp, a fresh folder (removed afterwards when the test passed)
#   DDP_MLP_BINARY   BUNDLE/bin/ddp_mlp (what tests/ddp_mlp/run_ddp_mlp.cc starts); the demos are found
#                    beside demos_test in BUNDLE/bin
#   LAUNCH_BINARY    BUNDLE/bin/launch (what tests/faults/ start ddp_mlp with)
#   LD_LIBRARY_PATH  BUNDLE/lib, then /usr/local/cuda/lib64
#   NCCL_NVLS_ENABLE=0 (NVLink multicast stays off on shared machines)
# and no launcher variables (RANK, WORLD_SIZE, ...) or Bazel runfiles variables from this shell. Its output
# goes to OUT/NAME/test.log, its gtest report to OUT/NAME/test.xml (default OUT: gpu_test_logs). Cases are
# counted from the reports (gtest_xml_counts.sh): a skipped case (no GPU, too few GPUs) counts as skipped;
# a binary that fails without a failed case in its report (a crash; over RUN_GPU_TESTS_TIMEOUT seconds,
# default 900 each) counts as one failure. Exits non-zero if anything failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
(( $# )) || { sed -n '2,20p' "$0"; exit 2; }
bundle=$(cd "$1" && pwd) || exit 2
out=${2:-gpu_test_logs}
shift $(( $# >= 2 ? 2 : 1 ))
wanted=("$@")
counter="$here/gtest_xml_counts.sh"
[[ -x $counter ]] || counter="$bundle/gtest_xml_counts.sh"
mkdir -p "$out"
out=$(cd "$out" && pwd)

export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0
[[ -x $bundle/bin/ddp_mlp ]] && export DDP_MLP_BINARY="$bundle/bin/ddp_mlp"
[[ -x $bundle/bin/launch ]] && export LAUNCH_BINARY="$bundle/bin/launch"
unset TEST_SRCDIR TEST_WORKSPACE RUNFILES_DIR RUNFILES_MANIFEST_FILE XML_OUTPUT_FILE GTEST_OUTPUT GTEST_FILTER
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR MASTER_PORT TINYDDP_NPROC \
  TINYDDP_LAUNCHER_STORE SLURM_PROCID OMPI_COMM_WORLD_RANK

command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | sed 's/^/run_gpu_tests: /'
reports=()
broken=()
start=$SECONDS
for test in "$bundle"/bin/*_test; do
  name=$(basename "$test")
  if (( ${#wanted[@]} )) && [[ " ${wanted[*]} " != *" $name "* ]]; then continue; fi
  dir="$out/$name"
  rm -rf "$dir"
  mkdir -p "$dir/tmp"
  t0=$SECONDS
  TEST_TMPDIR="$dir/tmp" timeout -k 10 "${RUN_GPU_TESTS_TIMEOUT:-900}" "$test" --gtest_output="xml:$dir/test.xml" \
    >"$dir/test.log" 2>&1
  rc=$?
  status=PASSED
  (( rc == 124 || rc == 137 )) && status=TIMEOUT
  (( rc != 0 && rc != 124 && rc != 137 )) && status=FAILED
  [[ $status == PASSED ]] && rm -rf "$dir/tmp"
  [[ $status == PASSED ]] || broken+=("$name $status")
  reports+=("$name=$dir/test.xml")
  line=$("$counter" "$name=$dir/test.xml" | tail -1)
  read -r _ p f s <<<"$line"
  printf '%-8s %-40s %3d passed, %d failed, %d skipped  %4ds\n' "$status" "$name" "$p" "$f" "$s" $(( SECONDS - t0 ))
done
(( ${#reports[@]} )) || { echo "run_gpu_tests: no *_test binary in $bundle/bin${wanted:+ named ${wanted[*]}}" >&2; exit 2; }

counts=$("$counter" "${reports[@]}")
read -r _ passed failed skipped <<<"$(tail -1 <<<"$counts")"
echo
grep '^failed ' <<<"$counts"
grep '^skipped ' <<<"$counts" | sed -E 's/^skipped [^ ]+ [^:]+(: )?//; s/^$/(no reason given)/' | sort | uniq -c |
  awk '{ n = $1; $1 = ""; printf "skipped: %d x%s\n", n, $0 }'
for b in "${broken[@]}"; do
  name=${b%% *}
  if ! grep -q "^failed $name " <<<"$counts"; then
    echo "failed $name (${b#* }, no failed case in its report; see $out/$name/test.log)"
    failed=$((failed + 1))
  fi
done
echo "logs: $out; wall time: $(( (SECONDS - start) / 60 ))m$(( (SECONDS - start) % 60 ))s"
echo "tests: ${passed} passed, ${failed} failed, ${skipped} skipped"
exit $(( failed > 0 ))

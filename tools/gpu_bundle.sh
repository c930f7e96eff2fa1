#!/usr/bin/env bash
# Build here, run on a GPU machine that has no Bazel: builds binaries with -c opt and copies them, with the
# shared libraries such a machine lacks and the test runner, into one folder to copy over.
#
#   tools/gpu_bundle.sh [-o DIR] [--pack] --gpu-suite        # every GPU test (see below) into DIR (.gpu)
#   tools/gpu_bundle.sh [-o DIR] [--pack] //tests/smoke:saxpy_test //bench:allreduce_bench ...
#   tools/gpu_bundle.sh --list                               # the test targets --gpu-suite bundles
#
#   --gpu-suite  every test tagged gpu (bazel query 'attr(tags, gpu, tests(//...))'), the CPU tests worth
#                running beside a GPU (their auto backend picks NCCL there) and //tools:nccl_reduce_scatter_check
#   --pack       also write DIR.tar.xz (stripped binaries compress about 10x)
#   BUNDLE_BAZEL_FLAGS  extra Bazel flags, e.g. "--//tools:cuda_archs=90" (H100/H200 only: smaller, faster build)
#
# DIR/bin gets each binary (debug info stripped) and the binaries its tests start (their cc_binary data:
# examples/ddp_mlp for ddp_mlp_gpu_test, the demos beside demos_test); DIR/lib the shared libraries that
# are not part of the driver, CUDA, cuBLAS, NCCL or the C/C++ runtime; DIR/run_gpu_tests.sh the runner.
# On the GPU machine:
#
#   DIR/run_gpu_tests.sh DIR OUT          # every DIR/bin/*_test, logs and XML in OUT, ends "tests: ..."
#   export LD_LIBRARY_PATH=$PWD/DIR/lib:/usr/local/cuda/lib64 NCCL_NVLS_ENABLE=0; DIR/bin/allreduce_bench
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."

# Tests without the gpu tag that behave differently beside a GPU: the demos and InitProcessGroup pick
# NCCL there (backend auto), and launch --check reports real devices.
extra_tests=(//examples:demos_test //dist:init_test //dist/launch:gpu_report_test)
extra_binaries=(//tools:nccl_reduce_scatter_check)

out=.gpu
pack=0
suite=0
list=0
targets=()
while (( $# )); do
  case $1 in
    -o) out=$2; shift 2 ;;
    --pack) pack=1; shift ;;
    --gpu-suite) suite=1; shift ;;
    --list) list=1; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    //*|:*) targets+=("$1"); shift ;;
    *) echo "gpu_bundle: unknown argument $1 (--help lists them)" >&2; exit 2 ;;
  esac
done

bazel_cmd=./bazelw
gpu_tests() { $bazel_cmd query 'attr(tags, gpu, tests(//...))' 2>/dev/null; printf '%s\n' "${extra_tests[@]}"; }
if (( list )); then gpu_tests; exit 0; fi
if (( suite )); then
  mapfile -t found < <(gpu_tests)
  (( ${#found[@]} > ${#extra_tests[@]} )) || {
    echo "gpu_bundle: no test is tagged gpu: is the CUDA toolkit missing (CUDA_HOME)? GPU targets need it to build" >&2
    exit 1
  }
  targets+=("${found[@]}" "${extra_binaries[@]}")
fi
(( ${#targets[@]} )) || { sed -n '2,21p' "$0"; exit 2; }
[[ $out == /* || $out == .gpu ]] || out="$caller/$out"  # -o is relative to where you are; .gpu to the repo

# The binaries the tests start, from their data attributes; through a link (//dist/launch:launch is an
# sh_binary naming //dist/elastic:launch), the binary it names.
data="labels(data, set(${targets[*]}))"
mapfile -t started < <($bazel_cmd query "kind('cc_binary rule', $data + labels(srcs, kind('sh_binary rule', $data)))" \
  2>/dev/null)
all=("${targets[@]}" "${started[@]}")

# shellcheck disable=SC2086  # BUNDLE_BAZEL_FLAGS is a list of flags
$bazel_cmd build -c opt ${BUNDLE_BAZEL_FLAGS:-} "${all[@]}"
# shellcheck disable=SC2086
bin=$($bazel_cmd info -c opt ${BUNDLE_BAZEL_FLAGS:-} bazel-bin 2>/dev/null)

rm -rf "$out/bin" "$out/lib"  # a previous bundle's binaries, not the whole folder
mkdir -p "$out/bin" "$out/lib"
# On the GPU machine already, or must come from its driver: never copied.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libstdc\+\+|libgcc_s|libcuda\.so|libcudart|libcublas|libnccl|libnvidia)'
for t in "${all[@]}"; do
  path=${t#//}
  pkg=${path%%:*}
  name=${path##*:}
  [[ $name == "$path" ]] && name=${pkg##*/}
  f="$bin/$pkg/$name"
  [[ -x $f ]] || { echo "gpu_bundle: no executable at $f for $t" >&2; exit 1; }
  strip --strip-debug -o "$out/bin/$name" "$f"
  ldd "$f" | awk '/=> \// {print $1, $3}' | while read -r so where; do
    [[ $so =~ $skip ]] && continue
    cp -fL "$where" "$out/lib/$so"
  done
done
cp tools/run_gpu_tests.sh tools/gtest_xml_counts.sh "$out/"
echo "gpu_bundle: $(ls "$out/bin" | wc -l) binaries, $(du -sh "$out" | cut -f1) in $out; on the GPU machine: $out/run_gpu_tests.sh $out OUT"
if (( pack )); then
  XZ_OPT=-T0 tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")"
  echo "gpu_bundle: packed into $out.tar.xz ($(du -sh "$out.tar.xz" | cut -f1))"
fi

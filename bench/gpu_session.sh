#!/usr/bin/env bash
# One measurement session on a GPU machine without Bazel: the GPU tests, then the benchmarks beside PyTorch
# in the same call, in priority order, each step writing its log as it goes (a session cut off by a time
# limit still leaves what it did). Build the bundle here first:
#
#   BUNDLE_BAZEL_FLAGS=--//tools:cuda_archs=90 tools/gpu_bundle.sh -o .gpu --gpu-suite \
#       //bench:ddp_step_bench //bench:allreduce_bench //bench:op_bench //examples:ddp_mlp
#
# then, on the GPU machine, from the repository root (PyTorch on python3 is the reference):
#
#   bench/gpu_session.sh BUNDLE OUT [STEP...]     # default steps: tests nccl ops steps torch
#
# Steps:
#   tests   every GPU test through tools/run_gpu_tests.sh            -> OUT/tests/, OUT/tests.log
#   nccl    the one-rank reduce-scatter check, with the system's NCCL and with PyTorch's  -> OUT/nccl.log
#   ops     op_bench: GEMM TFLOP/s and memory-bound GB/s, fp32 and bf16                -> OUT/ops.log
#   steps   ddp_step_bench on one GPU: tiny, medium, large x fp32, bf16 (where built)   -> OUT/steps.log
#   torch   the same steps in PyTorch: eager fp32, bf16 autocast, CUDA graph (tiny)    -> OUT/torch.log
#   compile PyTorch with torch.compile (slow: minutes of autotuning)                   -> OUT/compile.log
#   ddp     the DDP step on every GPU of the machine, tinyddp and PyTorch              -> OUT/ddp.log
#   zero    the DDP step on every GPU, --zero=0, 1, 2, 3 (ZeRO-1/2/3, docs/zero.md):
#           step time, bytes each rank holds (parameters, gradients, state, peak); PyTorch's
#           ZeroRedundancyOptimizer beside it on two or more GPUs                          -> OUT/zero.log
#   tp      tensor parallelism (docs/tensor_parallel.md): ddp_step_bench with the MLP split over --tp ranks beside the
#           plain step: --tp=1 on one GPU (the tensor-parallel module's path, one rank), and on N >= 2 GPUs
#           --tp=N (one row) and --tp=2 with N/2 data-parallel replicas                 -> OUT/tp.log
#   inbackward  the optimizer inside backward (docs/ddp.md): the DDP step on one GPU under --cuda_graph with and
#           without --optimizer_in_backward (tiny, medium, large x fp32, bf16), beside PyTorch's captured
#           step (bf16 autocast in one torch.cuda.graph)                              -> OUT/inbackward.log
#   ncu     Nsight Compute's per-kernel figures (grid, block, occupancy limits, SM and DRAM throughput) of
#           the eager in-backward step, medium and large bf16                 -> OUT/ncu_<w>.csv
#   graphs  the step as one CUDA graph (--cuda_graph) beside eager, tinyddp and PyTorch, one GPU
#           (tiny, medium, large x fp32, bf16), then DDP on every GPU               -> OUT/graphs.log
#   ladder  the DDP ladder (--ddp=naive|flat|bucketed|full) on the medium MLP with SVG timelines, and the
#           bucket-size sweep, on every GPU                                             -> OUT/ladder.log
#   allreduce  allreduce_bench (NCCL kernels and copy engines) beside PyTorch's NCCL   -> OUT/allreduce.log
#   mlp     ddp_mlp on Fashion-MNIST (needs DATA_DIR with the IDX files)               -> OUT/mlp.log
# Every JSON line the benchmarks print is also collected in OUT/results.jsonl.
set -uo pipefail
(( $# >= 2 )) || { sed -n '2,37p' "$0"; exit 2; }
bundle=$(cd "$1" && pwd) || exit 2
out=$2
shift 2
steps=("$@")
(( ${#steps[@]} )) || steps=(tests nccl ops steps torch)
mkdir -p "$out"
out=$(cd "$out" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)

export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
bin=$bundle/bin
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
declare -A dims=([tiny]="784,512,512,10" [medium]="1024,4096,4096,4096,4096,1024"
                 [large]="4096,8192,8192,8192,8192,4096")
declare -A batch=([tiny]=64 [medium]=256 [large]=512)

# Runs a command, appending its output to LOG (and its JSON lines to results.jsonl), with a header line.
run() {
  local log=$1; shift
  echo "### $(date -u +%H:%M:%S) $*" | tee -a "$out/$log.log"
  "$@" 2>&1 | tee -a "$out/$log.log" | grep '^{' >>"$out/results.jsonl"
}
has() { [[ -x $bin/$1 ]]; }
torch_ok() { python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; }

for step in "${steps[@]}"; do
  case $step in
    tests)
      "$bundle/run_gpu_tests.sh" "$bundle" "$out/tests" 2>&1 | tee "$out/tests.log" | grep -E '^(tests:|run_gpu_tests|.*(FAILED|PASSED|SKIPPED))'
      # One file for every test's log and report (a device tool may bring back only a few files).
      tar -C "$out" -cJf "$out/test_logs.tar.xz" tests && rm -rf "$out/tests" ;;
    nccl)
      has nccl_reduce_scatter_check || continue
      run nccl "$bin/nccl_reduce_scatter_check"
      # PyTorch's own NCCL (the nvidia-nccl wheel it ships with), for "whose bug is it".
      torch_nccl=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)/lib
      if [[ -f $torch_nccl/libnccl.so.2 ]]; then
        LD_LIBRARY_PATH="$torch_nccl:$LD_LIBRARY_PATH" run nccl "$bin/nccl_reduce_scatter_check"
      else
        echo "nccl: PyTorch's libnccl.so.2 not found (looked in '$torch_nccl')" | tee -a "$out/nccl.log"
      fi ;;
    ops)
      has op_bench && run ops "$bin/op_bench" --mlps=medium,large --precisions=fp32,bf16 ;;
    steps)
      has ddp_step_bench || continue
      for w in tiny medium large; do
        for p in fp32 bf16; do
          run steps "$bin/ddp_step_bench" --no_ddp --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=$p
        done
      done ;;
    torch)
      torch_ok || { echo "torch: no PyTorch with CUDA here" | tee -a "$out/torch.log"; continue; }
      for w in tiny medium large; do
        for p in fp32 bf16; do
          run torch python3 "$repo/bench/reference/torch_ddp_step.py" --no_ddp --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=$p
        done
      done
      run torch python3 "$repo/bench/reference/torch_ddp_step.py" --no_ddp --dims="${dims[tiny]}" --batch=64 --cuda_graph
      run torch python3 "$repo/bench/reference/torch_ddp_step.py" --no_ddp --dims="${dims[medium]}" --batch=256 --precision=bf16 --cuda_graph ;;
    compile)
      torch_ok || continue
      run compile python3 "$repo/bench/reference/torch_ddp_step.py" --no_ddp --dims="${dims[tiny]}" --batch=64 --compile=reduce-overhead
      run compile python3 "$repo/bench/reference/torch_ddp_step.py" --no_ddp --dims="${dims[medium]}" --batch=256 --precision=bf16 --compile=default
      run compile python3 "$repo/bench/reference/torch_ddp_step.py" --no_ddp --dims="${dims[large]}" --batch=512 --precision=bf16 --compile=max-autotune-no-cudagraphs ;;
    inbackward)
      has ddp_step_bench || continue
      for w in tiny medium large; do
        for p in fp32 bf16; do
          run inbackward "$bin/ddp_step_bench" --nproc=1 --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=$p --cuda_graph
          run inbackward "$bin/ddp_step_bench" --nproc=1 --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=$p --cuda_graph \
            --optimizer_in_backward
        done
        torch_ok && run inbackward python3 "$repo/bench/reference/torch_ddp_step.py" --no_ddp --dims="${dims[$w]}" \
          --batch="${batch[$w]}" --precision=bf16 --cuda_graph
      done
      # Fewer SMs for the GEMMs, the rest left to the updates' stream (bf16, graph; 132 SMs on an H100).
      for w in medium large; do
        for sms in 124 112 96; do
          run inbackward "$bin/ddp_step_bench" --nproc=1 --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=bf16 \
            --cuda_graph --gemm_sm_count=$sms
          run inbackward "$bin/ddp_step_bench" --nproc=1 --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=bf16 \
            --cuda_graph --gemm_sm_count=$sms --optimizer_in_backward
        done
      done ;;
    ncu)  # what the kernels of one eager in-backward step do: grid, block, registers, occupancy limits, time
      has ddp_step_bench || continue
      command -v ncu >/dev/null || { echo "no ncu on this machine" | tee -a "$out/ncu.log"; continue; }
      for w in medium large; do
        ncu --clock-control none --csv --launch-skip 400 --launch-count 60 \
          --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__occupancy_limit_warps,launch__waves_per_multiprocessor,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed \
          "$bin/ddp_step_bench" --nproc=1 --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=bf16 --warmup=20 --steps=5 \
          --optimizer_in_backward >"$out/ncu_$w.csv" 2>>"$out/ncu.log"
      done ;;
    ddp)
      has ddp_step_bench || continue
      for w in tiny medium large; do
        for p in fp32 bf16; do
          run ddp "$bin/ddp_step_bench" --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=$p
          torch_ok && (( gpus > 1 )) && run ddp torchrun --nproc_per_node="$gpus" "$repo/bench/reference/torch_ddp_step.py" \
            --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=$p
        done
      done ;;
    zero)
      has ddp_step_bench || continue
      for w in tiny medium large; do
        for p in fp32 bf16; do
          for z in 0 1 2 3; do
            run zero "$bin/ddp_step_bench" --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=$p --zero=$z
          done
          # PyTorch's ZeRO-1 beside it: ZeroRedundancyOptimizer around SGD, with DDP
          torch_ok && (( gpus > 1 )) && run zero torchrun --nproc_per_node="$gpus" \
            "$repo/bench/reference/torch_ddp_step.py" --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=$p --zero
        done
      done ;;
    tp)
      has ddp_step_bench || continue
      for w in tiny medium large; do
        for p in fp32 bf16; do
          run tp "$bin/ddp_step_bench" --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=$p
          run tp "$bin/ddp_step_bench" --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=$p --tp=1
          (( gpus > 1 )) && run tp "$bin/ddp_step_bench" --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=$p --tp="$gpus"
          (( gpus > 2 && gpus % 2 == 0 )) && run tp "$bin/ddp_step_bench" --dims="${dims[$w]}" --batch="${batch[$w]}" \
            --precision=$p --tp=2
        done
      done ;;
    ladder)
      # The four rungs on the medium MLP on every GPU, each with its trace and SVG timeline (OUT/ladder_*.svg),
      # then the bucket-size sweep: the tables and pictures of docs/ddp_ladder.md.
      has ddp_step_bench || continue
      for rung in naive flat bucketed full; do
        run ladder "$bin/ddp_step_bench" --dims="${dims[medium]}" --batch="${batch[medium]}" --ddp=$rung \
          --trace="$out/ladder_$rung.json"
      done
      run ladder "$bin/ddp_step_bench" --dims="${dims[medium]}" --batch="${batch[medium]}" --sweep_buckets ;;
    graphs)
      has ddp_step_bench || continue
      for w in tiny medium large; do
        for p in fp32 bf16; do
          for mode in "" --cuda_graph; do
            run graphs "$bin/ddp_step_bench" --no_ddp --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=$p $mode
            torch_ok && run graphs python3 "$repo/bench/reference/torch_ddp_step.py" --no_ddp --dims="${dims[$w]}" \
              --batch="${batch[$w]}" --precision=$p $mode
          done
        done
      done
      for w in tiny medium; do
        for p in fp32 bf16; do
          for mode in "" --cuda_graph; do
            run graphs "$bin/ddp_step_bench" --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=$p $mode
            torch_ok && (( gpus > 1 )) && run graphs torchrun --nproc_per_node="$gpus" \
              "$repo/bench/reference/torch_ddp_step.py" --dims="${dims[$w]}" --batch="${batch[$w]}" --precision=$p $mode
          done
        done
      done ;;
    allreduce)
      has allreduce_bench || continue
      run allreduce "$bin/allreduce_bench"
      run allreduce "$bin/allreduce_bench" --copy_engines
      torch_ok && (( gpus > 1 )) && [[ -f $repo/bench/reference/torch_allreduce.py ]] &&
        run allreduce torchrun --nproc_per_node="$gpus" "$repo/bench/reference/torch_allreduce.py" ;;
    mlp)
      has ddp_mlp && [[ -n ${DATA_DIR:-} ]] || { echo "mlp: needs bin/ddp_mlp and DATA_DIR" | tee -a "$out/mlp.log"; continue; }
      run mlp "$bin/ddp_mlp" --data_dir="$DATA_DIR"
      run mlp "$bin/ddp_mlp" --data_dir="$DATA_DIR" --epochs=20
      run mlp "$bin/ddp_mlp" --data_dir="$DATA_DIR" --epochs=20 --precision=bf16
      run mlp "$bin/ddp_mlp" --data_dir="$DATA_DIR" --epochs=20 --precision=bf16 --cuda_graph ;;
    *) echo "gpu_session: unknown step $step" >&2 ;;
  esac
done
echo "gpu_session: done (${steps[*]}); logs in $out"

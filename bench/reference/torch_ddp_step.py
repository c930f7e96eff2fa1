"""PyTorch reference for //bench:ddp_step_bench: the same MLP step, timed the same way.

Run on a GPU machine with PyTorch (never part of the product):
    python3 bench/reference/torch_ddp_step.py --dims=784,512,512,10 --batch=64 --no_ddp      # 1 GPU
    torchrun --nproc_per_node=2 bench/reference/torch_ddp_step.py --dims=784,512,512,10 --batch=64
PyTorch at its best, for the comparisons the benchmarks make:
    --precision=bf16          torch.autocast(dtype=torch.bfloat16) around forward and loss (fp32 master weights)
    --compile=MODE            torch.compile(model, mode=MODE): default, reduce-overhead, max-autotune,
                              max-autotune-no-cudagraphs
    --cuda_graph              forward + backward + optimizer step captured once in a torch.cuda.CUDAGraph and
                              replayed (the documented whole-network capture; with DDP, static_graph=True)
    --zero                    torch.distributed.optim.ZeroRedundancyOptimizer (ZeRO-1) around SGD, with DDP
    --fused_sgd               torch.optim.SGD(fused=True): one fused CUDA kernel for the whole step instead of
                              the default foreach kernels
Prints one readable line and one JSON line with the fields ddp_step_bench prints (step_ms_median_synced,
step_ms_burst, samples_per_s, params, world), so a script can put the two side by side.
"""
import argparse
import contextlib
import json
import os
import statistics

import torch
import torch.distributed as dist
import torch.nn as nn


def build_mlp(dims):
    layers = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i + 2 < len(dims):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dims", default="784,512,512,10")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--no_ddp", action="store_true")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--compile", default="", help="torch.compile mode; empty: eager")
    p.add_argument("--cuda_graph", action="store_true")
    p.add_argument("--zero", action="store_true")
    p.add_argument("--fused_sgd", action="store_true")
    args = p.parse_args()
    dims = [int(d) for d in args.dims.split(",")]

    distributed = not args.no_ddp and "RANK" in os.environ
    rank, world = 0, 1
    if distributed:
        dist.init_process_group("nccl")
        rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    torch.manual_seed(0)
    model = build_mlp(dims).to(dev)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank],
                                                    static_graph=args.cuda_graph)
    if args.compile:
        model = torch.compile(model, mode=None if args.compile == "default" else args.compile)
    if args.zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.01, momentum=0.9)
    else:
        # SGD keeps no host-side state that changes per step, so its step replays in a graph as captured.
        sgd_kwargs = {"fused": True} if args.fused_sgd else {}
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, **sgd_kwargs)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(args.batch, dims[0], device=dev)
    y = torch.randint(0, dims[-1], (args.batch,), device=dev)
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if args.precision == "bf16" \
        else contextlib.nullcontext

    def eager_step():
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    step = eager_step
    if args.cuda_graph:
        # PyTorch's recipe (docs: "whole network capture"): warm up on a side stream, then capture one step.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(11):
                eager_step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)  # backward inside the capture allocates .grad from the graph's pool
        with torch.cuda.graph(graph):
            with autocast():
                static_loss = loss_fn(model(x), y)
            static_loss.backward()
            opt.step()

        def step():
            graph.replay()
            return static_loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(args.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    if distributed:
        dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(args.steps):
        step()
    end.record()
    end.synchronize()
    burst = start.elapsed_time(end) / args.steps
    med = statistics.median(times)
    params = sum(p.numel() for p in model.parameters())
    variant = args.precision + (f" compile={args.compile}" if args.compile else "") + \
        (" cuda_graph" if args.cuda_graph else "") + (" zero1" if args.zero else "") + \
        (" fused_sgd" if args.fused_sgd else "")
    if rank == 0:
        result = {
            "impl": "pytorch", "variant": variant, "dims": args.dims, "batch": args.batch, "world": world,
            "step_ms_median_synced": round(med, 4), "step_ms_burst": round(burst, 4),
            "samples_per_s": round(args.batch * world * 1000.0 / burst, 1), "params": params,
        }
        print(f"pytorch {'DDP' if distributed else '1-GPU'} [{variant}] dims={args.dims} batch={args.batch} "
              f"world={world}: median {med:.3f} ms/step (synced), burst {burst:.3f} ms/step", flush=True)
        print(json.dumps(result), flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

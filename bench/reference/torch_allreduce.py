"""PyTorch reference for //bench:allreduce_bench: NCCL all_reduce (float32 sum) through torch.distributed.

    torchrun --nproc_per_node=2 bench/reference/torch_allreduce.py
Prints an nccl-tests-style table (size, time, algbw, busbw) so the two can be compared in one run.
"""
import json
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    sizes = [8 * 4 ** i for i in range(14)] + [25 * 2 ** 20, 64 * 2 ** 20, 256 * 2 ** 20, 2 ** 30]
    rows = []
    for nbytes in sorted(set(sizes)):
        x = torch.ones(max(nbytes // 4, 1), device="cuda")
        iters = 20 if nbytes >= 2 ** 28 else 100
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(x)
        end.record()
        end.synchronize()
        us = start.elapsed_time(end) * 1000 / iters
        algbw = nbytes / us / 1e3
        busbw = algbw * 2 * (world - 1) / world
        rows.append({"impl": "pytorch", "bytes": nbytes, "time_us": round(us, 2),
                     "algbw_GBps": round(algbw, 2), "busbw_GBps": round(busbw, 2)})
        if rank == 0:
            print(f"{nbytes:>12} {us:10.2f} us {algbw:8.2f} {busbw:8.2f} GB/s", flush=True)
    if rank == 0:
        print(json.dumps(rows))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

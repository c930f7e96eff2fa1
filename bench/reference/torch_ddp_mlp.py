"""PyTorch DDP reference for //examples:ddp_mlp: the same MLP, data, sampler and optimizer on Fashion-MNIST.

    torchrun --nproc_per_node=2 bench/reference/torch_ddp_mlp.py --data_dir=DIR --epochs=20 --lr=0.08
Reads the same IDX files (gzip), normalises pixels to [0, 1], shards with DistributedSampler, trains
784-512-512-10 (ReLU) with SGD momentum and cross-entropy at batch 64 per rank, and prints test accuracy
after every epoch plus the wall time. The data set is moved to the GPU once, so Python's data loading does
not hide the step time. PyTorch is a reference here, never part of the product.
"""
import argparse
import gzip
import json
import math
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data.distributed import DistributedSampler


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    ndims = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndims).reshape(dims)


def load(data_dir, split, dev):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz")).reshape(-1, 784)
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    return (torch.tensor(x, dtype=torch.float32, device=dev) / 255.0,
            torch.tensor(y, dtype=torch.int64, device=dev))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.08)
    p.add_argument("--lr_schedule", choices=["constant", "cosine"], default="cosine")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--hidden", default="512,512")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    torch.manual_seed(args.seed)
    dims = [784] + [int(h) for h in args.hidden.split(",")] + [10]
    layers = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i + 2 < len(dims):
            layers.append(nn.ReLU())
    model = nn.parallel.DistributedDataParallel(nn.Sequential(*layers).to(dev), device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()
    xtr, ytr = load(args.data_dir, "train", dev)
    xte, yte = load(args.data_dir, "test", dev)
    sampler = DistributedSampler(range(len(ytr)), num_replicas=world, rank=rank, shuffle=True, seed=args.seed)

    steps_per_epoch = (len(sampler) + args.batch_size - 1) // args.batch_size
    total_steps = steps_per_epoch * args.epochs
    # Per-step cosine from lr to 0, as ddp_mlp's default schedule (lr_t = lr * (1 + cos(pi t / T)) / 2).
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: 1.0 if args.lr_schedule == "constant" else 0.5 * (1 + math.cos(math.pi * t / total_steps)))
    torch.cuda.synchronize()
    t0 = time.time()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(sampler), device=dev)
        model.train()
        for b in range(0, len(idx), args.batch_size):
            bi = idx[b:b + args.batch_size]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xtr[bi]), ytr[bi])
            loss.backward()
            opt.step()
            sched.step()
        model.eval()
        with torch.no_grad():
            # Each rank scores a disjoint slice of the test set; all_reduce combines the counts exactly.
            lo, hi = rank * len(yte) // world, (rank + 1) * len(yte) // world
            logits = model.module(xte[lo:hi])
            stats = torch.tensor([(logits.argmax(1) == yte[lo:hi]).sum().item(),
                                  loss_fn(logits, yte[lo:hi]).item() * (hi - lo), hi - lo], device=dev,
                                 dtype=torch.float64)
            dist.all_reduce(stats)
        if rank == 0:
            print(f"epoch {epoch + 1}: test accuracy {stats[0] / stats[2]:.4f}, test loss {stats[1] / stats[2]:.4f}, "
                  f"{time.time() - t0:.1f} s", flush=True)
    if rank == 0:
        print(json.dumps({"impl": "pytorch", "epochs": args.epochs, "world": world,
                          "test_accuracy": round(float(stats[0] / stats[2]), 4),
                          "wall_s": round(time.time() - t0, 1)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

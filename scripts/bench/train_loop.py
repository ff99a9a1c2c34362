#!/usr/bin/python3
"""A real, small PyTorch CPU training loop for scripts/bench/wrapper-overhead.

resnet18 (torchvision, num_classes=10) trained with SGD on random tensors
(FakeData-like: a fixed pool of images and labels drawn once from a fixed
seed, so every run does identical work), one intra-op thread. Each step's
wall time (forward, backward, optimizer step, loss.item()) and the CPU time
of the training thread during it are written to --out, "wall_ms cpu_ms" per
line, after the loop ends so that writing them costs nothing inside the
timed region. Wall time is what the job feels; thread CPU time does not
count time the core spent on other processes, so it shows whether the
wrapper makes a step do more work even on a machine shared with others.

The loop reports progress through scripts/isched.py exactly as a user's
script would: under isched-wrapper every step appends a progress line (part
of the overhead being measured); without the wrapper the helper is a no-op.
It also prints one line per step to stdout, which the wrapper passes
through (and may match with --iter-pattern).

Usage: train_loop.py --steps 120 --out times.txt [--batch 16] [--size 64]
"""

import argparse
import os
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import isched  # noqa: E402  (scripts/isched.py, stdlib only)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--size", type=int, default=64, help="image side in pixels")
    ap.add_argument("--pool", type=int, default=8, help="distinct batches cycled through")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", required=True, help="file for per-step times (ms)")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    model = torchvision.models.resnet18(num_classes=10)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    lossf = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed)
    xs = [torch.randn(args.batch, 3, args.size, args.size, generator=gen) for _ in range(args.pool)]
    ys = [torch.randint(0, 10, (args.batch,), generator=gen) for _ in range(args.pool)]

    times = []
    for step in range(args.steps):
        x, y = xs[step % args.pool], ys[step % args.pool]
        t0, c0 = time.perf_counter(), time.thread_time()
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        lv = loss.item()
        isched.step(step + 1, epoch=0, loss=lv, total=args.steps)
        print("step %d loss %.4f" % (step + 1, lv), flush=True)
        times.append(((time.perf_counter() - t0) * 1000.0, (time.thread_time() - c0) * 1000.0))

    with open(args.out, "w") as f:
        for wall, cpu in times:
            f.write("%.4f %.4f\n" % (wall, cpu))


if __name__ == "__main__":
    main()

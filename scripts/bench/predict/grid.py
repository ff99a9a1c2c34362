#!/usr/bin/python3
"""Measure the grid that `make bench-predict` compares isched's estimates with.

    nice scripts/bench/predict/grid.py -o scripts/bench/predict/testdata/grid.json

Each cell is a fresh /usr/bin/python3 that trains a torchvision model (random
weights, 10 classes, 3x64x64 random inputs, SGD with momentum 0.9, fp32, CPU,
--threads torch threads) for --warmup + --steps iterations: the real peak RSS
of the training process (VmHWM at the end) and the median time of the
iterations after the warm-up. The load average before and after each cell is
recorded with it: on a shared machine the times are the machine's as it was.
No shell; every child has a timeout.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

_CHILD = r"""
import json, sys, time
import torch, torchvision
arch, batch, size, threads, warmup, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
torch.manual_seed(0)
torch.set_num_threads(threads)
model = getattr(torchvision.models, arch)(num_classes=10)
model.train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,))
times = []
for i in range(warmup + steps):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    times.append(time.perf_counter() - t0)
hwm = 0
with open("/proc/self/status") as f:
    for line in f:
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
print(json.dumps({"iter_ms": [t * 1000 for t in times[warmup:]], "peak_rss_bytes": hwm}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--archs", default="resnet18,mobilenet_v2,resnet50")
    ap.add_argument("--batches", default="8,16,32,64")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--timeout", type=int, default=900, help="seconds one cell may take")
    ap.add_argument("-o", "--output", default="-")
    args = ap.parse_args()
    import torch  # noqa: PLC0415
    cells = []
    for arch in args.archs.split(","):
        for b in [int(s) for s in args.batches.split(",")]:
            load0 = os.getloadavg()[0]
            p = subprocess.run([sys.executable, "-c", _CHILD, arch, str(b), str(args.size), str(args.threads),
                                str(args.warmup), str(args.steps)], capture_output=True, text=True,
                               timeout=args.timeout, check=False)
            if p.returncode != 0:
                sys.exit("grid: %s batch %d failed: %s" % (arch, b, p.stderr[-800:]))
            r = json.loads(p.stdout.strip().splitlines()[-1])
            cell = {"arch": arch, "batch": b, "peak_rss_bytes": r["peak_rss_bytes"],
                    "median_iter_ms": round(statistics.median(r["iter_ms"]), 2),
                    "iter_ms": [round(t, 2) for t in r["iter_ms"]],
                    "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2)}
            sys.stderr.write("grid: %s\n" % json.dumps(cell))
            cells.append(cell)
    out = {"v": 1, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "framework": "pytorch " + torch.__version__, "optimizer": "momentum", "precision": "fp32",
           "input_shape": [3, args.size, args.size], "num_classes": 10, "threads": args.threads,
           "warmup": args.warmup, "steps": args.steps, "cells": cells}
    text = json.dumps(out, indent=1) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Measure a receipts grid for the planner's band calibration.

Each (model, batch, repeat) runs in its own process: CPU training of a
torchvision model at 64x64, 10 classes, SGD, one thread; warm-up iterations
left out of the mean iteration time; the process's VmHWM is its peak RSS.
The iteration time is the process's CPU time per iteration (one thread):
on a shared machine wall time measured the neighbours' load (up to 3x
between repeats), CPU time the model. Prints one report.Receipt JSON per
line.

Regenerate: /usr/bin/python3 scripts/bandgrid/grid.py > internal/plan/testdata/bandgrid.jsonl
"""
import json
import subprocess
import sys

MODELS = ["resnet18", "mobilenet_v2", "resnet50"]
BATCHES = [4, 8, 16, 32, 64]
REPEATS = 2
WARMUP, MEASURED = 2, 6

CHILD = r"""
import sys, time, torch, torchvision
torch.set_num_threads(1)
name, batch, warm, meas = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
m = getattr(torchvision.models, name)(num_classes=10)
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(batch, 3, 64, 64)
y = torch.randint(0, 10, (batch,))
lossf = torch.nn.CrossEntropyLoss()
ts = []
for i in range(warm + meas):
    t0 = time.process_time()
    opt.zero_grad()
    lossf(m(x), y).backward()
    opt.step()
    ts.append(time.process_time() - t0)
hwm = 0
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        hwm = int(line.split()[1]) * 1024
print(sum(ts[warm:]) / meas * 1000, hwm)
"""


def main():
    for rep in range(REPEATS):
        for model in MODELS:
            for b in BATCHES:
                out = subprocess.run([sys.executable, "-c", CHILD, model, str(b), str(WARMUP), str(MEASURED)],
                                     check=True, capture_output=True, text=True).stdout.split()
                rec = {"model": model + ":sgd:fp32", "batch": b, "partition": "cpu", "node_type": "local-cpu",
                       "gpus": 0, "iter_ms": round(float(out[0]), 2), "peak_rss_bytes": int(out[1]),
                       "peak_gpu_bytes": 0, "iters": MEASURED, "user": "grid", "wall_s": 0, "ended_ms": 0}
                print(json.dumps(rec), flush=True)
                print(f"{model} batch {b} rep {rep}: {rec['iter_ms']} ms, {rec['peak_rss_bytes'] >> 20} MiB",
                      file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()

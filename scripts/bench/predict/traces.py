#!/usr/bin/python3
"""Record the per-step times of real CPU training runs for the ETA replay of `make bench-predict`.

    nice scripts/bench/predict/traces.py -o scripts/bench/predict/testdata/traces.json

Each run is a fresh /usr/bin/python3 that trains a torchvision model (random
weights, 10 classes, 3x--size x--size random inputs, SGD with momentum,
fp32, CPU, --threads torch threads) for --steps iterations and reports the
wall time of every step, start-up and warm-up included (the estimator must
skip them itself). Every --runs configuration runs alone. Every --shift
configuration ARCH:BATCH:FROM-TO runs again with --burners busy-loop
processes sharing the CPUs from the step at fraction FROM of the run to the
step at fraction TO: a changed regime, measured (0-0.05: a job sharing the
node ended early in the run, as a data loader warming its cache does;
0.3-1: one arrived). The load average before and after each run is
recorded with it. --eval-every and --ckpt-every add eval phases and
checkpoints, each counted in the step it follows (the wrapper sees the next
iteration line that much later). No shell; a burner stops itself after --timeout seconds,
and a run that outlives it is killed.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

_CHILD = r"""
import json, os, sys, time
import torch, torchvision
arch, batch, size, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
eval_every, eval_steps, ckpt_every, ckpt_dir = int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8]), sys.argv[9]
torch.manual_seed(0)
torch.set_num_threads(threads)
model = getattr(torchvision.models, arch)(num_classes=10)
model.train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,))
times = []
for i in range(steps):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    # an eval phase or a checkpoint lands in the step before it, as the
    # wrapper sees it: the next iteration line comes that much later
    if eval_every and (i + 1) % eval_every == 0:
        model.eval()
        with torch.no_grad():
            for _ in range(eval_steps):
                model(x)
        model.train()
    if ckpt_every and (i + 1) % ckpt_every == 0:
        tmp = ckpt_dir + "/ckpt.pt.tmp"
        with open(tmp, "wb") as f:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": i + 1}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, ckpt_dir + "/ckpt.pt")
    t1 = time.perf_counter()
    times.append(t1 - t0)
    print("step", i + 1, flush=True)
print(json.dumps({"iter_ms": [t * 1000 for t in times]}))
"""

_BURNER = "import sys, time\nt = time.time() + float(sys.argv[1])\nwhile time.time() < t: pass\n"


def one(args, arch, batch, burn=None):
    """One run; burners share the CPUs while the run does the steps in
    burn = (first, last) (first 0: from the start)."""
    load0 = os.getloadavg()[0]
    burners = []

    def start_burners():
        burners.extend(subprocess.Popen([sys.executable, "-c", _BURNER, str(args.timeout)])
                       for _ in range(args.burners))

    def stop_burners():
        for b in burners:
            b.kill()
            b.wait()
        burners.clear()

    if burn and burn[0] == 0:
        start_burners()
    errf = tempfile.TemporaryFile(mode="w+")
    ckdir = tempfile.TemporaryDirectory(prefix="traces-ckpt-")
    p = subprocess.Popen([sys.executable, "-c", _CHILD, arch, str(batch), str(args.size), str(args.threads), str(args.steps),
                          str(args.eval_every), str(args.eval_steps), str(args.ckpt_every), ckdir.name],
                         stdout=subprocess.PIPE, stderr=errf, text=True)
    last = ""
    killer = threading.Timer(args.timeout, p.kill)
    killer.start()
    try:
        for line in p.stdout:
            last = line
            if burn and line.startswith("step "):
                step = int(line.split()[1])
                if burn[0] > 0 and step == burn[0] and not burners:
                    start_burners()
                elif step >= burn[1] and burners:
                    stop_burners()
        p.wait(timeout=args.timeout)
    finally:
        killer.cancel()
        stop_burners()
        ckdir.cleanup()
    if p.returncode != 0:
        errf.seek(0)
        sys.exit("traces: %s batch %d failed (exit %d; -9: killed after --timeout %d s): %s" % (
            arch, batch, p.returncode, args.timeout, errf.read()[-800:]))
    r = json.loads(last)
    name = "%s-b%d" % (arch, batch)
    if burn:
        name += "-load%d-%d" % (round(100 * burn[0] / args.steps), round(100 * burn[1] / args.steps))
    run = {"name": name, "arch": arch, "batch": batch,
           "iter_ms": [round(t, 1) for t in r["iter_ms"]],
           "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2)}
    if args.eval_every:
        run["eval_every"], run["eval_steps"] = args.eval_every, args.eval_steps
    if args.ckpt_every:
        run["ckpt_every"] = args.ckpt_every
    if burn:
        run["burners"] = args.burners
        run["burn_steps"] = list(burn)  # burners ran from after step [0] until step [1] ended
    sys.stderr.write("traces: %s %d steps, %.1f s, load %.2f-%.2f%s\n" % (
        run["name"], len(run["iter_ms"]), sum(run["iter_ms"]) / 1000, run["load_before"], run["load_after"],
        ", burners over steps %d-%d" % tuple(burn) if burn else ""))
    return run


def parse(spec, steps=None):
    """ARCH:BATCH, or with steps ARCH:BATCH:FROM-TO (fractions of the run)."""
    parts = spec.split(":")
    if steps is None:
        if len(parts) != 2:
            sys.exit("traces: %r: want ARCH:BATCH" % spec)
        return parts[0], int(parts[1])
    if len(parts) != 3:
        sys.exit("traces: %r: want ARCH:BATCH:FROM-TO" % spec)
    lo, _, hi = parts[2].partition("-")
    first, last = round(float(lo) * steps), round(float(hi) * steps)
    if not 0 <= first < last <= steps:
        sys.exit("traces: %r: want 0 <= FROM < TO <= 1" % spec)
    return parts[0], int(parts[1]), (first, last)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default="resnet18:8,resnet18:16,mobilenet_v2:8", help="arch:batch,... run alone")
    ap.add_argument("--shift", default="resnet18:8:0-0.05,mobilenet_v2:8:0-0.05,resnet18:8:0-0.3,resnet18:8:0.3-1",
                    help="ARCH:BATCH:FROM-TO,... run with burners over that part of the run")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--burners", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=0, help="an eval phase (--eval-steps forward passes, no grad) after every N steps; 0: none")
    ap.add_argument("--eval-steps", type=int, default=20)
    ap.add_argument("--ckpt-every", type=int, default=0,
                    help="a checkpoint (model and optimizer state, written, fsynced and renamed) after every N steps; 0: none")
    ap.add_argument("--timeout", type=int, default=600, help="seconds one run may take")
    ap.add_argument("-o", "--output", default="-")
    args = ap.parse_args()
    import torch  # noqa: PLC0415
    runs = [one(args, *parse(spec)) for spec in filter(None, args.runs.split(","))]
    runs += [one(args, *parse(spec, args.steps)) for spec in filter(None, args.shift.split(","))]
    out = {"v": 1, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "framework": "pytorch " + torch.__version__, "input_shape": [3, args.size, args.size],
           "threads": args.threads, "cpus": os.cpu_count(), "runs": runs}
    text = json.dumps(out, separators=(",", ":")) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Record the per-step times of real CPU training runs for the ETA replay of `make bench-predict`.

    nice scripts/bench/predict/traces.py -o scripts/bench/predict/testdata/traces.json

Each run is a fresh /usr/bin/python3 that trains a torchvision model (random
weights, 10 classes, 3x--size x--size random inputs, SGD with momentum,
fp32, CPU, --threads torch threads) for --steps iterations and reports the
wall time of every step, start-up and warm-up included (the estimator must
skip them itself). Every configuration runs once alone; each --shift
configuration then runs again with --burners busy-loop processes sharing the
CPUs until the run has done --burn-frac of its steps, when they are killed: a
changed regime, measured. The load average before and after
each run is recorded with it. No shell; a burner stops itself after --timeout
seconds, and a run that outlives it is killed.
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
import json, sys, time
import torch, torchvision
arch, batch, size, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
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
    t1 = time.perf_counter()
    times.append(t1 - t0)
    print("step", i + 1, flush=True)
print(json.dumps({"iter_ms": [t * 1000 for t in times]}))
"""

_BURNER = "import sys, time\nt = time.time() + float(sys.argv[1])\nwhile time.time() < t: pass\n"


def one(args, arch, batch, burn_steps=0):
    """One run; burners share the CPUs until the run has done burn_steps steps."""
    load0 = os.getloadavg()[0]
    burners = [subprocess.Popen([sys.executable, "-c", _BURNER, str(args.timeout)])
               for _ in range(args.burners if burn_steps > 0 else 0)]
    errf = tempfile.TemporaryFile(mode="w+")
    p = subprocess.Popen([sys.executable, "-c", _CHILD, arch, str(batch), str(args.size), str(args.threads), str(args.steps)],
                         stdout=subprocess.PIPE, stderr=errf, text=True)
    last = ""
    killer = threading.Timer(args.timeout, p.kill)
    killer.start()
    try:
        for line in p.stdout:
            last = line
            if burners and line.startswith("step ") and int(line.split()[1]) >= burn_steps:
                for b in burners:
                    b.kill()
                    b.wait()
                burners = []
        p.wait(timeout=args.timeout)
    finally:
        killer.cancel()
        for b in burners:
            b.kill()
            b.wait()
    if p.returncode != 0:
        errf.seek(0)
        sys.exit("traces: %s batch %d failed (exit %d; -9: killed after --timeout %d s): %s" % (
            arch, batch, p.returncode, args.timeout, errf.read()[-800:]))
    r = json.loads(last)
    run = {"name": "%s-b%d%s" % (arch, batch, "-shift" if burn_steps else ""), "arch": arch, "batch": batch,
           "iter_ms": [round(t, 1) for t in r["iter_ms"]],
           "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2)}
    if burn_steps:
        run["burners"] = args.burners
        run["shift_step"] = burn_steps  # the burners were killed when this step ended
    sys.stderr.write("traces: %s %d steps, %.1f s, load %.2f-%.2f%s\n" % (
        run["name"], len(run["iter_ms"]), sum(run["iter_ms"]) / 1000, run["load_before"], run["load_after"],
        ", burners until step %d" % burn_steps if burn_steps else ""))
    return run


def parse(spec):
    arch, batch = spec.split(":")
    return arch, int(batch)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default="resnet18:8,resnet18:16,mobilenet_v2:8", help="arch:batch,... run alone")
    ap.add_argument("--shift", default="resnet18:8,mobilenet_v2:8", help="configurations run with burners")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--burners", type=int, default=2)
    ap.add_argument("--burn-frac", type=float, default=0.3)
    ap.add_argument("--timeout", type=int, default=600, help="seconds one run may take")
    ap.add_argument("-o", "--output", default="-")
    args = ap.parse_args()
    import torch  # noqa: PLC0415
    runs = [one(args, *parse(spec)) for spec in filter(None, args.runs.split(","))]
    burn = max(1, round(args.burn_frac * args.steps))
    runs += [one(args, *parse(spec), burn_steps=burn) for spec in filter(None, args.shift.split(","))]
    out = {"v": 1, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "framework": "pytorch " + torch.__version__, "input_shape": [3, args.size, args.size],
           "threads": args.threads, "cpus": os.cpu_count(), "burn_frac": args.burn_frac, "runs": runs}
    text = json.dumps(out, separators=(",", ":")) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()

"""A deterministic fake trainer for isched profile's tests (stdlib only).

fake_trainer.py --batch-size B --pid-file F [--total T]
Each iteration takes B * 4 ms (the first 3 take 0.6 s: a warm-up) and the
process holds B * 6 MiB more than at start (touched, so it is resident);
it prints "step N/T" after each iteration and writes its pid to F. On
SIGTERM it "saves a checkpoint": holds 200 MiB more for a second, then exits.
"""
import argparse
import os
import signal
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=0)
p.add_argument("--pid-file", required=True)
p.add_argument("--total", type=int, default=100000)
a = p.parse_args()
batch = a.batch_size or int(os.environ.get("ISCHED_BATCH", "0"))
if batch <= 0:
    sys.exit("fake_trainer: no batch size")
with open(a.pid_file, "w") as f:
    f.write(str(os.getpid()))
held = bytearray(batch * 6 << 20)
for i in range(0, len(held), 4096):
    held[i] = 1


def on_term(signum, frame):
    buf = bytearray(200 << 20)
    for i in range(0, len(buf), 4096):
        buf[i] = 1
    time.sleep(1)
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
for step in range(1, a.total + 1):
    time.sleep(0.6 if step <= 3 else batch * 0.004)
    print(f"step {step}/{a.total}", flush=True)

"""Deterministic fake trainer for the wrapper's tests (stdlib only).

Allocates and touches --mb MiB, runs --steps steps of --period seconds each,
reports every step through scripts/isched.py (with the loop's clock), saves a
checkpoint (write temp, rename) every --ckpt-every steps into
ISCHED_CHECKPOINT_DIR, checkpoints when the wrapper asks (control file or
signal), resumes from ISCHED_RESUME_FROM, and ends with --exit N or SIGKILLs
itself with --kill-self. Writes facts for the test to --facts as JSON.
"""
import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.environ["ISCHED_HELPER_DIR"])
import isched  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--mb", type=int, default=0)
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--period", type=float, default=0.1)
ap.add_argument("--ckpt-every", type=int, default=0)
ap.add_argument("--exit", type=int, default=0)
ap.add_argument("--kill-self", action="store_true")
ap.add_argument("--facts", default="")
ap.add_argument("--wait-request", action="store_true", help="run until a checkpoint is requested")
a = ap.parse_args()

isched.install_signal_handlers()
buf = bytearray(a.mb * 1024 * 1024)
for i in range(0, len(buf), 4096):
    buf[i] = 1


def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                yield line.split()[0][:-1], int(line.split()[1]) * 1024


ckdir = os.environ.get("ISCHED_CHECKPOINT_DIR", "")
start = 0
rp = isched.resume_path()
if rp:
    with open(rp) as f:
        start = int(f.read().split()[0])
    isched.resumed(start, rp)


def save(step):
    p = os.path.join(ckdir, "ckpt-step%d.pt" % step)
    isched.save(lambda tmp: open(tmp, "w").write("%d %s\n" % (step, "x" * 4096)), p, step=step)
    return p


facts = {"start": start, "pid": os.getpid(), "node": os.environ.get("SLURMD_NODENAME", ""),
         "restart": os.environ.get("SLURM_RESTART_COUNT", ""), "requested": False}
step = start
deadline = time.time() + 120
while step < a.steps or (a.wait_request and time.time() < deadline):
    t0 = time.time()
    while time.time() - t0 < a.period:
        time.sleep(max(0.0, a.period - (time.time() - t0)))
    step += 1
    isched.step(step, epoch=0, loss=1.0 / step, total=a.steps)
    if ckdir and a.ckpt_every and step % a.ckpt_every == 0:
        save(step)
    if isched.should_checkpoint():
        facts["requested"] = True
        facts["requested_ckpt"] = save(step)
        facts.setdefault("ckpts_on_request", []).append(step)
        if a.wait_request:
            break
    if isched.stop_requested():
        # SIGTERM (requeue, preemption, time limit): the request above saved
        # this step; leave now so the move is fast
        facts["stopped"] = step
        break
facts["end"] = step
facts.update(dict(rss()))
if a.facts:
    with open(a.facts + ".tmp", "w") as f:
        json.dump(facts, f)
    os.replace(a.facts + ".tmp", a.facts)
print("fake trainer done at step", step, flush=True)
if a.kill_self:
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(a.exit)

"""Deterministic fake trainer for the wrapper's and the end-to-end tests (stdlib only).

Allocates and touches --mb MiB (at start, or at step --alloc-at), runs --steps
steps of --period seconds each, reports every step through scripts/isched.py
(with the loop's clock), saves a checkpoint (write temp, rename) every
--ckpt-every steps into ISCHED_CHECKPOINT_DIR, checkpoints when the wrapper
asks (control file or signal), resumes from ISCHED_RESUME_FROM, and ends with
--exit N or SIGKILLs itself with --kill-self. Writes facts for the test to
--facts as JSON.

Several ranks (srun -n N): rank 0 (SLURM_PROCID) alone saves checkpoints,
every rank resumes from ISCHED_RESUME_FROM, and rank r > 0 writes its facts to
<facts>.rank<r>. Every attempt also leaves its facts in
<facts>[.rank<r>].attempt<SLURM_RESTART_COUNT>, so a test can read what each
attempt did after the job was requeued.

Checkpoints end with a trailer line: a resumed run checks it and, if the file
is truncated, records "resume_corrupt" and exits 3 (what torch.load would do,
with a clearer message).

Fault injection for the first attempt only (SLURM_RESTART_COUNT unset or 0):
--crash-at N SIGKILLs the trainer after step N; with --crash-mid-save it first
leaves half of step N's checkpoint in the temporary file (a save cut short).
--no-total keeps the step count to itself (a loop that does not know it).
The facts hold the interpreter (executable, prefix) and, under env, the
variables named by --env-facts (null when unset): what environment ran.
--gpu-speedup F makes a step F times shorter when Slurm allocated GPUs to the
job (CUDA_VISIBLE_DEVICES set), as the coordinator's partition speeds assume
(the wrapper itself says ISCHED_DEVICE=cpu there: the emulated GPUs have no NVML).
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
ap.add_argument("--alloc-at", type=int, default=0, help="allocate --mb at this step instead of at start")
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--period", type=float, default=0.1)
ap.add_argument("--ckpt-every", type=int, default=0)
ap.add_argument("--ckpt-mb", type=int, default=0, help="pad each checkpoint to this many MiB, written in 1 MiB chunks (page cache, not RSS)")
ap.add_argument("--exit", type=int, default=0)
ap.add_argument("--kill-self", action="store_true")
ap.add_argument("--facts", default="")
ap.add_argument("--wait-request", action="store_true", help="run until a checkpoint is requested")
ap.add_argument("--crash-at", type=int, default=0, help="first attempt: SIGKILL itself after this step")
ap.add_argument("--crash-mid-save", action="store_true", help="with --crash-at: leave a half-written temporary checkpoint first")
ap.add_argument("--no-total", action="store_true", help="do not tell isched the total step count")
ap.add_argument("--start-file", default="",
                help="before the first step, record facts with waiting=true and wait (at most 5 min) for this file to exist")
ap.add_argument("--pause-at", type=int, default=0,
                help="after this step, wait (at most 5 min) for --resume-file to exist")
ap.add_argument("--resume-file", default="")
ap.add_argument("--env-facts", default="", help="comma-separated environment variables to record in the facts (env.NAME)")
ap.add_argument("--gpu-speedup", type=float, default=1.0,
                help="steps take --period / this when Slurm gave the job GPUs (CUDA_VISIBLE_DEVICES): the lab's GPUs are emulated")
a = ap.parse_args()

TRAILER = "end-of-checkpoint\n"
rank = int(os.environ.get("SLURM_PROCID", "0") or 0)
restart = os.environ.get("SLURM_RESTART_COUNT", "")
first_attempt = restart in ("", "0")

isched.install_signal_handlers()
buf = bytearray()


def allocate():
    global buf
    buf = bytearray(a.mb * 1024 * 1024)
    for i in range(0, len(buf), 4096):
        buf[i] = 1


if a.alloc_at <= 0:
    allocate()


def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                yield line.split()[0][:-1], int(line.split()[1]) * 1024


facts = {"start": 0, "pid": os.getpid(), "node": os.environ.get("SLURMD_NODENAME", ""),
         "restart": restart, "rank": rank, "requested": False,
         "device": os.environ.get("ISCHED_DEVICE", ""), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
         "executable": sys.executable, "prefix": sys.prefix,
         "env": {n: os.environ.get(n) for n in a.env_facts.split(",") if n}}


def write_facts():
    if not a.facts:
        return
    path = a.facts if rank == 0 else "%s.rank%d" % (a.facts, rank)
    for p in (path, "%s.attempt%s" % (path, restart or "0")):
        with open(p + ".tmp", "w") as f:
            json.dump(facts, f)
        os.replace(p + ".tmp", p)


ckdir = os.environ.get("ISCHED_CHECKPOINT_DIR", "")
start = 0
rp = isched.resume_path()
if rp:
    with open(rp) as f:
        content = f.read()
    facts["resumed_from"] = rp
    if not content.endswith(TRAILER):
        facts["resume_corrupt"] = rp
        facts["end"] = None
        write_facts()
        print("fake trainer: checkpoint %s is truncated" % rp, file=sys.stderr, flush=True)
        sys.exit(3)
    start = int(content.split()[0])
    isched.resumed(start, rp)
facts["start"] = start


def ckpt_body(step):
    return "%d %s\n%s" % (step, "x" * 4096, TRAILER)


def write_ckpt(tmp, step):
    with open(tmp, "w") as f:
        if a.ckpt_mb <= 0:
            f.write(ckpt_body(step))
            return
        f.write("%d " % step)
        chunk = "x" * (1 << 20)
        for _ in range(a.ckpt_mb):
            f.write(chunk)
        f.write("\n" + TRAILER)


def save(step):
    p = os.path.join(ckdir, "ckpt-step%d.pt" % step)
    if rank != 0:
        return p  # rank 0 saves for the job; every rank resumes from it
    isched.save(lambda tmp: write_ckpt(tmp, step), p, step=step)
    return p


def crash(step):
    if a.crash_mid_save and ckdir and rank == 0:
        body = ckpt_body(step)
        with open(os.path.join(ckdir, "ckpt-step%d.pt.tmp" % step), "w") as f:
            f.write(body[: len(body) // 2])
    facts["crashed"] = step
    facts["end"] = step
    write_facts()
    os.kill(os.getpid(), signal.SIGKILL)


period = a.period
if os.environ.get("CUDA_VISIBLE_DEVICES", "") not in ("", "NoDevFiles") and a.gpu_speedup > 0:
    period = a.period / a.gpu_speedup
facts["period"] = period
step = start


def wait_for(path):
    """Wait (at most 5 min) for path to exist, with facts saying so."""
    facts["waiting"] = True
    write_facts()
    give_up = time.time() + 300
    while not os.path.exists(path):
        if time.time() > give_up:
            print("fake trainer: %s did not appear within 5 min" % path, file=sys.stderr, flush=True)
            sys.exit(4)
        time.sleep(0.05)
    del facts["waiting"]


if a.start_file:
    # a barrier: jobs that Slurm launched seconds apart start training together
    wait_for(a.start_file)
deadline = time.time() + 120
step_at = []  # the trainer's own clock at each reported step
while step < a.steps or (a.wait_request and time.time() < deadline):
    t0 = time.time()
    while time.time() - t0 < period:
        time.sleep(max(0.0, period - (time.time() - t0)))
    step += 1
    if a.alloc_at > 0 and step == a.alloc_at:
        allocate()
    step_at.append(time.monotonic())
    isched.step(step, epoch=0, loss=1.0 / step, total=None if a.no_total else a.steps)
    if ckdir and a.ckpt_every and step % a.ckpt_every == 0:
        save(step)
    if a.pause_at and step == a.pause_at and a.resume_file:
        wait_for(a.resume_file)
    if first_attempt and a.crash_at and step == a.crash_at:
        crash(step)
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
if len(step_at) > 1:
    # what the wrapper's iteration clock should find: the median time
    # between reported steps, by the trainer's own clock
    gaps = sorted(b - c for b, c in zip(step_at[1:], step_at[:-1]))
    facts["median_step_ms"] = 1000 * gaps[len(gaps) // 2] if len(gaps) % 2 else 500 * (gaps[len(gaps) // 2 - 1] + gaps[len(gaps) // 2])
facts.update(dict(rss()))
write_facts()
print("fake trainer done at step", step, flush=True)
if a.kill_self:
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(a.exit)

"""A plain PyTorch training loop for the conventions matrix (issue 14).

It knows nothing of isched except ISCHED_RESUME_FROM (set by the wrapper
on an attempt that has a checkpoint to resume from), and, with
--convention helper, scripts/isched.py. It prints `step N/T loss L`,
saves ckpt-<step>.pt atomically every --ckpt-every steps, and handles
signals as --convention says:

  usr1-exit0    SIGUSR1: save, exit 0 (submitit, many site guides)
  usr1-exit143  SIGUSR1: save, exit 143
  periodic      no handler: periodic checkpoints only (Slurm's SIGTERM kills it)
  requeue-self  SIGUSR1: save, `scontrol requeue $SLURM_JOB_ID`, exit 0 (Lightning)
  sigterm       SIGTERM: save, exit 143 (no --signal)
  helper        scripts/isched.py: control-file requests, save, keep going

Each attempt keeps --facts.<restart> up to date (every step: a script
killed by a signal leaves what it had): the restart count, the step it
resumed from, the last step it finished, the last it saved and how it
ended.
"""

# The SIGUSR1 handler of the USR1 conventions comes before anything else,
# even argparse: Slurm may send --signal's warning up to a minute early, so
# a job with a 1-minute limit can get it while the interpreter is still
# importing (seen once in CI: exit 138 at 0.1 s, nothing saved).
import signal  # noqa: I001
import sys

asked = []
if "--convention" in sys.argv[:-1] and sys.argv[sys.argv.index("--convention") + 1] in ("usr1-exit0", "usr1-exit143", "requeue-self"):
    signal.signal(signal.SIGUSR1, lambda s, f: asked.append(s))

import argparse  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import trainfacts  # beside this script: the facts the Go test reads

p = argparse.ArgumentParser()
p.add_argument("--convention", required=True)
p.add_argument("--steps", type=int, required=True)
p.add_argument("--period", type=float, default=0.1)
p.add_argument("--ckpt-dir", required=True)
p.add_argument("--ckpt-every", type=int, default=100)
p.add_argument("--facts", required=True)
a = p.parse_args()

# Handlers first, before the heavy imports: a SIGUSR1 or SIGTERM that
# arrives while torch is importing would otherwise end the process (the
# default action) with nothing saved. Slurm may send --signal's warning up
# to a minute early.
if a.convention in ("usr1-exit0", "usr1-exit143", "requeue-self"):
    pass  # installed at the top
elif a.convention == "sigterm":
    signal.signal(signal.SIGTERM, lambda s, f: asked.append(s))
elif a.convention == "helper":
    sys.path.insert(0, os.environ["ISCHED_HELPER_DIR"])
    import isched
    isched.install_signal_handlers()

import torch  # noqa: E402

torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 16), torch.randn(64, 1)

facts = trainfacts.new(a.facts, convention=a.convention)


def write_facts():
    trainfacts.write(facts)


def record(how, code):
    trainfacts.record(facts, how, code)


start = 0
resume = os.environ.get("ISCHED_RESUME_FROM")
if a.convention == "helper":
    resume = isched.resume_path()
if resume:
    state = torch.load(resume)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"]
    if a.convention == "helper":
        isched.resumed(start, resume)
facts["start"] = facts["end"] = facts["saved"] = start
print("resumed from %s at step %d" % (resume, start) if resume else "starting from scratch", flush=True)


def save(step):
    path = os.path.join(a.ckpt_dir, "ckpt-%d.pt" % step)
    state = {"step": step, "model": model.state_dict(), "opt": opt.state_dict()}
    if a.convention == "helper":
        isched.save(lambda q: torch.save(state, q), path, step=step)
    else:
        tmp = os.path.join(a.ckpt_dir, "tmp-%d.pt" % step)
        torch.save(state, tmp)
        os.replace(tmp, path)
    facts["saved"] = step
    write_facts()


for step in range(start + 1, a.steps + 1):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(a.period)
    facts["end"], facts["t1"] = step, time.time()
    write_facts()
    print("step %d/%d loss %.4f" % (step, a.steps, loss.item()), flush=True)
    if step % a.ckpt_every == 0 or step == a.steps:
        save(step)
    if a.convention == "helper":
        if isched.should_checkpoint() and facts["saved"] != step:
            save(step)
        if isched.stop_requested():
            record("stopped", 0)
        continue
    if asked:
        if facts["saved"] != step:
            save(step)
        if a.convention == "usr1-exit0":
            record("usr1", 0)
        if a.convention == "requeue-self":
            subprocess.run(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]], check=False)
            record("requeued itself", 0)
        record("signal %d" % asked[0], 143)
record("done", 0)

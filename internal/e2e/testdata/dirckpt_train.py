"""A plain PyTorch training loop that saves directory checkpoints (issue 14, 4g).

The loop of convention_train.py (SIGUSR1: save, exit 0), saving a
directory of several files in one of three layouts, each written as the
library that defines it writes it, the file that marks it complete last:

  hf         Hugging Face Trainer: checkpoint-<step>/ with pytorch_model.bin,
             optimizer.pt, scheduler.pt, rng_state.pth, then
             trainer_state.json; resumed from --resume_from_checkpoint DIR
             (the wrapper's --resume-arg), as a Trainer script is
  dcp        torch.distributed.checkpoint: step_<step>/ with one shard per
             rank, __0_0.distcp and __1_0.distcp, then .metadata (written to
             .metadata.tmp and renamed, as FileSystemWriter does). Debian's
             torch 1.13 has no torch.distributed.checkpoint (and its
             torch.distributed._shard.checkpoint does not import under
             Python 3.11), so the layout is written by hand: torch.save
             shards and a pickled .metadata naming them
  deepspeed  DeepSpeed: global_step<step>/ with mp_rank_00_model_states.pt and
             zero_pp_rank_0_mp_rank_00_optim_states.pt, then the top-level
             "latest" file naming the tag, written in place after the
             directory (as engine.save_checkpoint does)

dcp and deepspeed resume from ISCHED_RESUME_FROM (the directory).

--half-written: the first attempt, asked to stop (SIGUSR1, or SIGTERM:
it handles both), begins the checkpoint it was asked for, which stalls
for 2 s and is killed mid-save (SIGKILL, as an OOM kill or a node
failure would; see killed_mid_save): that directory lacks
the file its layout writes last (trainer_state.json, .metadata, the
"latest" naming it; for DeepSpeed every file of the tag is there, only
"latest" was not updated). No later attempt may resume from it.

Each attempt keeps --facts.<restart> up to date as convention_train.py
does, plus the path it resumed from ("resume", and for hf the flag's
value "resume_arg") and the half-written directory ("half").
"""

# The SIGUSR1 handler before anything else, even argparse (see
# convention_train.py: Slurm's early --signal on a 1-minute job).
import signal  # noqa: I001

asked = []
signal.signal(signal.SIGUSR1, lambda s, f: asked.append(s))

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import trainfacts  # beside this script: the facts the Go test reads

p = argparse.ArgumentParser()
p.add_argument("--layout", required=True, choices=["hf", "dcp", "deepspeed"])
p.add_argument("--steps", type=int, required=True)
p.add_argument("--period", type=float, default=0.1)
p.add_argument("--ckpt-dir", required=True)
p.add_argument("--ckpt-every", type=int, default=100)
p.add_argument("--facts", required=True)
p.add_argument("--half-written", action="store_true")
p.add_argument("--resume_from_checkpoint")
a = p.parse_args()

# the SIGTERM handler too before the heavy imports (see convention_train.py)
inject = a.half_written and os.environ.get("SLURM_RESTART_COUNT", "0") == "0"
if inject:
    # whatever ends this attempt (SIGUSR1; the SIGTERM of a requeue, of
    # the time limit or of the wrapper) ends it through the half-written
    # save below: the SIGKILL that follows SIGTERM comes 10 s (the
    # wrapper's --grace) or 30 s (Slurm's KillWait) later
    signal.signal(signal.SIGTERM, lambda s, f: asked.append(s))

import torch  # noqa: E402

torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=100, gamma=0.9)
x, y = torch.randn(64, 16), torch.randn(64, 1)

facts = trainfacts.new(a.facts, layout=a.layout, resume="", resume_arg=a.resume_from_checkpoint or "", half="")


def write_facts():
    trainfacts.write(facts)


def record(how, code):
    trainfacts.record(facts, how, code)


def fresh_dir(path):
    # a directory left by a save that died is written anew
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def save_hf(step, last=True):
    d = fresh_dir(os.path.join(a.ckpt_dir, "checkpoint-%d" % step))
    torch.save(model.state_dict(), os.path.join(d, "pytorch_model.bin"))
    torch.save(opt.state_dict(), os.path.join(d, "optimizer.pt"))
    torch.save(sched.state_dict(), os.path.join(d, "scheduler.pt"))
    torch.save({"cpu": torch.get_rng_state()}, os.path.join(d, "rng_state.pth"))
    if last:
        with open(os.path.join(d, "trainer_state.json"), "w") as f:
            json.dump({"global_step": step, "max_steps": a.steps, "log_history": []}, f, indent=2)
    return d


def load_hf(d):
    with open(os.path.join(d, "trainer_state.json")) as f:
        step = json.load(f)["global_step"]
    model.load_state_dict(torch.load(os.path.join(d, "pytorch_model.bin")))
    opt.load_state_dict(torch.load(os.path.join(d, "optimizer.pt")))
    sched.load_state_dict(torch.load(os.path.join(d, "scheduler.pt")))
    torch.set_rng_state(torch.load(os.path.join(d, "rng_state.pth"))["cpu"])
    return step


def save_dcp(step, last=True):
    d = fresh_dir(os.path.join(a.ckpt_dir, "step_%d" % step))
    # two "ranks": the model's shard and the optimizer's
    shards = {"__0_0.distcp": {"model": model.state_dict()},
              "__1_0.distcp": {"optim": opt.state_dict(), "sched": sched.state_dict()}}
    for name, obj in shards.items():
        torch.save(obj, os.path.join(d, name))
    if last:
        meta = {"step": step, "storage_data": {k: list(v) for k, v in shards.items()}}
        with open(os.path.join(d, ".metadata.tmp"), "wb") as f:
            pickle.dump(meta, f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(os.path.join(d, ".metadata.tmp"), os.path.join(d, ".metadata"))
    return d


def load_dcp(d):
    with open(os.path.join(d, ".metadata"), "rb") as f:
        meta = pickle.load(f)
    state = {}
    for name in meta["storage_data"]:
        state.update(torch.load(os.path.join(d, name)))
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])
    sched.load_state_dict(state["sched"])
    return meta["step"]


def save_deepspeed(step, last=True):
    tag = "global_step%d" % step
    d = fresh_dir(os.path.join(a.ckpt_dir, tag))
    torch.save({"module": model.state_dict(), "global_steps": step, "lr_scheduler": sched.state_dict()},
               os.path.join(d, "mp_rank_00_model_states.pt"))
    torch.save({"optimizer_state_dict": opt.state_dict()}, os.path.join(d, "zero_pp_rank_0_mp_rank_00_optim_states.pt"))
    if last:
        # DeepSpeed writes "latest" in place, after the tag's files
        with open(os.path.join(a.ckpt_dir, "latest"), "w") as f:
            f.write(tag)
    return d


def load_deepspeed(d):
    # engine.load_checkpoint(load_dir, tag): the tag from the path given
    load_dir, tag = os.path.split(d)
    ms = torch.load(os.path.join(load_dir, tag, "mp_rank_00_model_states.pt"))
    model.load_state_dict(ms["module"])
    sched.load_state_dict(ms["lr_scheduler"])
    opt.load_state_dict(torch.load(os.path.join(load_dir, tag, "zero_pp_rank_0_mp_rank_00_optim_states.pt"))["optimizer_state_dict"])
    return ms["global_steps"]


save_layout = {"hf": save_hf, "dcp": save_dcp, "deepspeed": save_deepspeed}[a.layout]
load_layout = {"hf": load_hf, "dcp": load_dcp, "deepspeed": load_deepspeed}[a.layout]

start = 0
resume = os.environ.get("ISCHED_RESUME_FROM", "")
if a.layout == "hf":
    # a Trainer script resumes from its flag, not the environment
    resume = a.resume_from_checkpoint or ""
if resume:
    if not os.path.isdir(resume):
        print("resume point %s is not a directory" % resume, file=sys.stderr, flush=True)
        record("bad resume point", 3)
    start = load_layout(resume)
facts["start"] = facts["end"] = facts["saved"] = start
facts["resume"] = resume
write_facts()
print("resumed from %s at step %d" % (resume, start) if resume else "starting from scratch", flush=True)


def save(step):
    save_layout(step)
    facts["saved"] = step
    write_facts()


def train_step(step, period=a.period):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    time.sleep(period)
    facts["end"], facts["t1"] = step, time.time()
    write_facts()
    print("step %d/%d loss %.4f" % (step, a.steps, loss.item()), flush=True)


def killed_mid_save(step):
    """The save asked for at step is begun and never finished.

    No complete checkpoint lands after the request (the coordinator would
    requeue the job as soon as one did, killing it before the half-written
    save): the next attempt resumes from this attempt's last periodic
    checkpoint. Only if it has none yet (an early SIGUSR1 from Slurm) is
    one saved first, and the half-written one is then the next step's,
    begun at once (the step's compute without its sleep: milliseconds,
    well before the complete one can be confirmed).
    """
    if facts["saved"] == 0:
        save(step)
    if facts["saved"] == step:
        step += 1
        train_step(step, period=0)
    facts["half"] = save_layout(step, last=False)
    facts["how"], facts["t1"] = "killed mid-save", time.time()
    write_facts()
    sys.stdout.flush()
    # the save stalls (slow storage) for more than six of the test's
    # 300 ms debounce and quiet periods, long enough for a watcher that
    # took the directory for complete without its marker to confirm it
    # (and record it as the newest), then the process is killed
    time.sleep(2)
    os.kill(os.getpid(), signal.SIGKILL)


for step in range(start + 1, a.steps + 1):
    train_step(step)
    if asked and inject and step < a.steps - 1:
        killed_mid_save(step)
    if step % a.ckpt_every == 0 or step == a.steps:
        save(step)
    if asked:
        if facts["saved"] != step:
            save(step)
        record("usr1", 0)
record("done", 0)

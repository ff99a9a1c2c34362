"""An elastic run for TestElasticFrameworksOnCluster/huggingface: the real
Hugging Face Trainer (use_cpu, DDP over gloo when the attempt has several
ranks), as docs/training-scripts.md tells a Trainer script to resize:

    python3 elastic_hf.py --facts F --steps N [--step-work S]

gradient_accumulation_steps is isched.accumulation(8, 2) for the world
isched-wrapper gives each rank, so every optimizer step sees 8 samples at
any world size; the real IschedCallback saves on the wrapper's request (and
on SIGTERM), and the Trainer resumes from
isched.hf.resume_from_checkpoint(), skipping the steps done of the epoch.
The Trainer's own sampler (one seeded order, sharded by batch across the
ranks) gives a step the same samples at any world size, so a step redone
after a resize has the loss it had. A GPU's compute is emulated: a step
sleeps step-work / world size. Rank 0 appends one JSON line per optimizer
step to F: step, samples, world size, global batch, loss.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import isched
import isched.hf as ihf
from compat import cpu_map_location  # python/tests: torch 1.13's shims

N, GLOBAL_BATCH, PER_RANK = 256, 8, 2


class Net(torch.nn.Module):
    def __init__(self, step_work):
        super().__init__()
        torch.manual_seed(1)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()
        self.step_work, self.loss_sum, self.seen = step_work, 0.0, 0

    def forward(self, x, labels=None):
        out = self.net(x)
        loss = torch.nn.functional.mse_loss(out, labels)
        self.loss_sum, self.seen = self.loss_sum + loss.item(), self.seen + len(x)
        _, size, _ = isched.world()
        time.sleep(self.step_work / size / isched.accumulation(GLOBAL_BATCH, PER_RANK, size))
        return {"loss": loss, "logits": out}


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, 8, generator=g, dtype=torch.float64)
    y = (x @ torch.linspace(-1, 1, 8, dtype=torch.float64).reshape(8, 1)).tanh()
    return [{"x": x[i], "labels": y[i]} for i in range(N)]


def saved_samples():
    """The samples the resumed checkpoint's isched.json recorded (0: a fresh start)."""
    d = ihf.resume_from_checkpoint()
    if not d:
        return 0
    with open(os.path.join(d, ihf.STATE_FILE)) as f:
        return json.load(f)["samples"]


def facts_callback(base, model, facts, samples):
    class Facts(base):
        """Rank 0's line per optimizer step (every rank takes part in the sum)."""

        def on_step_end(self, args, state, control, **kw):
            nonlocal samples
            t = torch.tensor([model.loss_sum, float(model.seen)], dtype=torch.float64)
            if dist.is_initialized():
                dist.all_reduce(t)
            micro = args.gradient_accumulation_steps * args.world_size
            batch, model.loss_sum, model.seen = int(t[1]), 0.0, 0
            samples += batch
            if state.is_world_process_zero:
                with open(facts, "a") as f:
                    f.write(json.dumps({"step": state.global_step, "samples": samples, "world": args.world_size,
                                        "batch": batch, "loss": t[0].item() / micro}) + "\n")
    return Facts()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--facts", required=True)
    ap.add_argument("--step-work", type=float, default=0.2)
    a = ap.parse_args()
    from transformers import Trainer, TrainerCallback, TrainingArguments

    if torch.__version__.split(".")[0] == "1":
        cpu_map_location()
    _, size, _ = isched.world()
    # no ddp_backend at one rank: the wrapper sets no WORLD_SIZE for a step
    # of one task, and accelerate 0.30 with a backend but no group fails
    args = TrainingArguments(output_dir=os.path.join(os.environ.get("ISCHED_CHECKPOINT_DIR", "."), "hf"),
                             max_steps=a.steps, per_device_train_batch_size=PER_RANK,
                             gradient_accumulation_steps=isched.accumulation(GLOBAL_BATCH, PER_RANK),
                             learning_rate=0.05, lr_scheduler_type="constant", optim="sgd", use_cpu=True,
                             ddp_backend="gloo" if size > 1 else None, save_strategy="no", report_to=[], disable_tqdm=True, seed=0,
                             logging_strategy="no")
    if args.world_size != size:
        sys.exit("the Trainer's world size %d is not the wrapper's %d" % (args.world_size, size))
    model = Net(a.step_work)
    trainer = Trainer(model=model, args=args, train_dataset=data(),
                      callbacks=[facts_callback(TrainerCallback, model, a.facts, saved_samples()), ihf.IschedCallback()])
    trainer.train(resume_from_checkpoint=ihf.resume_from_checkpoint())
    if dist.is_initialized():
        # torch 1.13 can hang at exit here: the DDP reducer's gloo group,
        # freed with the GIL held, joins a gloo thread that waits for the
        # GIL. Every rank is done and its files are written: leave at once.
        dist.barrier()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()

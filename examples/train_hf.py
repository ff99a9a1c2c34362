#!/usr/bin/env python3
"""A small Hugging Face Trainer job that isched can measure, checkpoint, move
and resume, through isched.hf.IschedCallback.

    python3 train_hf.py --epochs 2 --steps-per-epoch 50 --batch 32

A small MLP classifier (a torch.nn.Module whose forward returns the loss,
which the Trainer accepts) on random vectors with labels that depend on
them, generated in memory from --seed: no model or data set is downloaded.
Needs transformers (with accelerate, as its Trainer does) and the isched
package (pip install ./python, or this repository's python/ is used).

- IschedCallback reports state.global_step with state.max_steps, sets
  control.should_save when the wrapper asks (the Trainer then writes
  <output-dir>/checkpoint-N itself), writes a pointer to it into
  ISCHED_CHECKPOINT_DIR and reports that;
- resume_from_checkpoint() turns the pointer the wrapper exports on a new
  attempt (ISCHED_RESUME_FROM) back into the checkpoint directory;
- the Trainer uses the GPU when CUDA is usable.
"""

import argparse
import json
import os
import sys

try:
    import isched.hf as ih
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import isched.hf as ih

import torch
import torch.nn.functional as F
from transformers import Trainer, TrainingArguments


class MLP(torch.nn.Module):
    def __init__(self, dim=64, hidden=256, classes=10):
        super().__init__()
        self.l1 = torch.nn.Linear(dim, hidden)
        self.l2 = torch.nn.Linear(hidden, classes)

    def forward(self, x, labels=None):
        logits = self.l2(F.relu(self.l1(x)))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits, labels)
        return out


class Synthetic(torch.utils.data.Dataset):
    def __init__(self, n, dim, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, dim, generator=g)
        self.y = (self.x[:, :8].sum(dim=1) * 3).long() % 10

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--steps-per-epoch", type=int, default=50)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--output-dir", default="out-hf", help="the Trainer's output_dir (its checkpoint-N directories)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--result", default="", help="write final facts (step) as JSON here")
    a = ap.parse_args(argv)

    torch.manual_seed(a.seed)
    data = Synthetic(a.steps_per_epoch * a.batch, 64, a.seed)
    args = TrainingArguments(output_dir=a.output_dir, num_train_epochs=a.epochs, per_device_train_batch_size=a.batch,
                             learning_rate=1e-3, save_strategy="no", logging_steps=10, report_to=[],
                             disable_tqdm=True, seed=a.seed, dataloader_drop_last=True)
    cb = ih.IschedCallback()
    trainer = Trainer(model=MLP(), args=args, train_dataset=data, callbacks=[cb])
    ckpt = ih.resume_from_checkpoint()
    print("training on %s, resuming from %s" % (args.device, ckpt), flush=True)
    trainer.train(resume_from_checkpoint=ckpt)
    facts = {"step": trainer.state.global_step, "total": trainer.state.max_steps, "resumed_from": ckpt,
             "saves": cb.pointers, "device": str(args.device)}
    print("done: " + json.dumps(facts), flush=True)
    if a.result:
        with open(a.result + ".tmp", "w") as f:
            json.dump(facts, f)
        os.replace(a.result + ".tmp", a.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

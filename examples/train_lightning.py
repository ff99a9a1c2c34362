#!/usr/bin/env python3
"""A small PyTorch Lightning training job that isched can measure, checkpoint,
move and resume, through isched.lightning.IschedCallback.

    python3 train_lightning.py --epochs 2 --steps-per-epoch 50 --batch 32

A small CNN on random 1x28x28 images with labels that depend on the image
(so the loss falls), generated in memory from --seed: nothing is
downloaded. Needs Lightning 2.x (`lightning` or `pytorch_lightning`) and the
isched package (pip install ./python, or this repository's python/ is used).

- IschedCallback reports trainer.global_step with the total, saves through
  trainer.save_checkpoint when the wrapper asks (into ISCHED_CHECKPOINT_DIR,
  else --ckpt-dir), and reports each checkpoint;
- resume_ckpt_path() is the checkpoint a new attempt resumes from
  (ISCHED_RESUME_FROM, or a newer Lightning hpc checkpoint);
- accelerator "auto": the GPU when CUDA is usable, else the CPU.
"""

import argparse
import json
import os
import sys

try:
    import isched.lightning as il
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import isched.lightning as il

import torch
import torch.nn.functional as F

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl


class SmallCNN(pl.LightningModule):
    def __init__(self, lr=0.01):
        super().__init__()
        self.lr = lr
        self.conv1 = torch.nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = torch.nn.Linear(64 * 7 * 7, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def synthetic(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 28, 28, generator=g)
    y = (x[:, 0, :14, :].mean(dim=(1, 2)) * 100).long() % 10  # learnable from the image
    return torch.utils.data.TensorDataset(x, y)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--steps-per-epoch", type=int, default=50)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--ckpt-dir", default=os.environ.get("ISCHED_CHECKPOINT_DIR", "ckpt-lightning"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--result", default="", help="write final facts (step, loss) as JSON here")
    a = ap.parse_args(argv)

    pl.seed_everything(a.seed)
    data = synthetic(a.steps_per_epoch * a.batch, a.seed)
    loader = torch.utils.data.DataLoader(data, batch_size=a.batch, shuffle=True, drop_last=True,
                                         generator=torch.Generator().manual_seed(a.seed))
    cb = il.IschedCallback(dirpath=a.ckpt_dir)
    trainer = pl.Trainer(max_epochs=a.epochs, accelerator="auto", devices=1, callbacks=[cb], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=a.ckpt_dir)
    model = SmallCNN()
    ckpt = il.resume_ckpt_path(trainer.default_root_dir)
    print("training on %s, resuming from %s" % (trainer.strategy.root_device, ckpt), flush=True)
    trainer.fit(model, loader, ckpt_path=ckpt)
    loss = trainer.callback_metrics.get("train_loss")
    facts = {"step": trainer.global_step, "total": trainer.estimated_stepping_batches, "resumed_from": ckpt,
             "saves": cb.saved_paths, "device": str(trainer.strategy.root_device),
             "loss": float(loss) if loss is not None else None}
    print("done: " + json.dumps(facts), flush=True)
    if a.result:
        with open(a.result + ".tmp", "w") as f:
            json.dump(facts, f)
        os.replace(a.result + ".tmp", a.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

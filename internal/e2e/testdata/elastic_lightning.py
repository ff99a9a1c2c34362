"""An elastic run for TestElasticFrameworksOnCluster/lightning: the real
Lightning Trainer (ddp over gloo on the CPU when the attempt has several
ranks), as docs/training-scripts.md tells a Lightning script to resize:

    python3 elastic_lightning.py --facts F --steps N [--step-work S]

isched.lightning.trainer_kwargs(8, 4) gives devices, num_nodes and
accumulate_grad_batches for the world isched-wrapper gives each rank, so
every optimizer step sees 8 samples at any world size; the real
IschedCallback saves on the wrapper's request and restates Lightning's
position in the epoch on a resume at another size, and the fit resumes
from isched.lightning.resume_ckpt_path(). Lightning's own sampler restarts
an epoch's data on a mid-epoch resume (docs/training-scripts.md), so the
loader's batch sampler is isched.global_batches / rank_batches from the
restored step: a step redone after a resize sees the data it saw before.
Under srun Lightning picks its SLURMEnvironment; the script fails unless
that world (rank, size) is the wrapper's. A GPU's compute is emulated: a
step sleeps step-work / world size. Rank 0 appends one JSON line per
optimizer step to F: step, samples, world size, global batch, loss.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import isched
import isched.lightning as ilt
from compat import lightning_module_base  # python/tests: torch 1.13's shims

N, GLOBAL_BATCH, PER_RANK = 256, 8, 4


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, 8, generator=g, dtype=torch.float64)
    return x, (x @ torch.linspace(-1, 1, 8, dtype=torch.float64).reshape(8, 1)).tanh()


class RankBatches(torch.utils.data.Sampler):
    """This rank's micro-batches of the global batches left in the epoch,
    counted from the trainer's step when Lightning asks for an iterator
    (after it restored a checkpoint)."""

    def __init__(self, trainer):
        super().__init__(None)
        self.trainer = trainer

    def __len__(self):
        return N // GLOBAL_BATCH * isched.accumulation(GLOBAL_BATCH, PER_RANK)

    def __iter__(self):
        seen = self.trainer.global_step * GLOBAL_BATCH
        batches = isched.global_batches(N, GLOBAL_BATCH, samples=seen, seed=7)
        for _ in range((N - seen % N) // GLOBAL_BATCH):
            yield from isched.rank_batches(next(batches), PER_RANK)


def module_class(pl, facts, step_work):
    class Net(lightning_module_base(pl)):
        def __init__(self):
            super().__init__()
            torch.manual_seed(1)
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()
            self.samples, self.loss_sum, self.seen = 0, 0.0, 0

        def training_step(self, batch, i):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.loss_sum, self.seen = self.loss_sum + loss.item(), self.seen + len(x)
            time.sleep(step_work / self.trainer.world_size / self.trainer.accumulate_grad_batches)
            return loss

        def on_before_optimizer_step(self, optimizer):
            # once per optimizer step, before IschedCallback's save in
            # on_train_batch_end: the checkpoint holds this step's samples
            step = self.trainer.global_step + 1
            t = torch.tensor([self.loss_sum, float(self.seen)], dtype=torch.float64)
            if dist.is_initialized():
                dist.all_reduce(t)
            micro = self.trainer.accumulate_grad_batches * self.trainer.world_size
            batch_size, self.loss_sum, self.seen = int(t[1]), 0.0, 0
            self.samples += batch_size
            if self.trainer.is_global_zero:
                with open(facts, "a") as f:
                    f.write(json.dumps({"step": step, "samples": self.samples, "world": self.trainer.world_size,
                                        "batch": batch_size, "loss": t[0].item() / micro}) + "\n")

        def on_save_checkpoint(self, checkpoint):
            checkpoint["samples"] = self.samples

        def on_load_checkpoint(self, checkpoint):
            self.samples = checkpoint["samples"]

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
    return Net


def check_world(trainer):
    """Lightning's world (its SLURMEnvironment under srun) is the wrapper's."""
    rank, size, _ = isched.world()
    got = (trainer.global_rank, trainer.world_size, type(trainer._accelerator_connector.cluster_environment).__name__)
    if got[:2] != (rank, size):
        sys.exit("Lightning's rank %d of %d (%s) is not the wrapper's %d of %d" % (got + (rank, size)))
    print("rank %d of %d, cluster environment %s" % got, file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--facts", required=True)
    ap.add_argument("--step-work", type=float, default=0.2)
    a = ap.parse_args()
    import lightning.pytorch as pl

    class World(pl.Callback):
        def on_fit_start(self, trainer, pl_module):
            check_world(trainer)

    trainer = pl.Trainer(max_steps=a.steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                         default_root_dir=os.environ.get("ISCHED_CHECKPOINT_DIR", "."),
                         callbacks=[World(), ilt.IschedCallback()], **ilt.trainer_kwargs(GLOBAL_BATCH, PER_RANK))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*data()), batch_sampler=RankBatches(trainer))
    trainer.fit(module_class(pl, a.facts, a.step_work)(), loader, ckpt_path=ilt.resume_ckpt_path())
    if dist.is_initialized():
        dist.destroy_process_group()  # else gloo's threads may abort the exit


if __name__ == "__main__":
    main()

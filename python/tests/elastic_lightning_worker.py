"""One rank of test_elastic.py's Lightning runs (ddp over gloo on the CPU
when WORLD_SIZE > 1, the ranks started by the test as isched-wrapper starts
them: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT).

    python3 elastic_lightning_worker.py OUT NAME MAX_EPOCHS REQUEST_AT GLOBAL_BATCH BATCH_PER_RANK

The Trainer gets isched.lightning.trainer_kwargs(GLOBAL_BATCH, ...) and the
real IschedCallback, resumes from ISCHED_RESUME_FROM through
resume_ckpt_path(), and asks for a checkpoint (each rank's control file)
once global_step reaches REQUEST_AT (0: never). Each rank writes
OUT/NAME-rank<R>.json: per optimizer step [step, samples this rank put into
it, micro-batches], the final weights, global_step and the kwargs.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import torch  # noqa: E402

N = 32


def module_class(pl):
    from compat import lightning_module_base  # torch 1.13 under Python 3.11

    class M(lightning_module_base(pl)):
        def __init__(self):
            super().__init__()
            torch.manual_seed(1)
            self.lin = torch.nn.Linear(4, 1)
            self.pending, self.record = [], []

        def training_step(self, batch, i):
            x, y = batch
            self.pending.append(len(x))
            return torch.nn.functional.mse_loss(self.lin(x), y)

        def on_before_optimizer_step(self, optimizer):
            self.record.append([self.trainer.global_step + 1, sum(self.pending), len(self.pending)])
            self.pending = []

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
    return M


def requester(pl, at):
    class Request(pl.Callback):
        """The wrapper's request, written once global_step reaches `at`."""

        def on_train_batch_end(self, trainer, *a):
            path = os.environ["ISCHED_CONTROL_FILE"]
            if trainer.global_step == at and not os.path.exists(path):
                with open(path, "w") as f:
                    f.write("checkpoint\n")
    return Request()


def main(out, name, epochs, at, global_batch, per_rank):
    rank = int(os.environ.get("RANK", "0"))
    os.environ.update(ISCHED_PROGRESS_FILE=os.path.join(out, name + "-progress"),
                      ISCHED_CONTROL_FILE=os.path.join(out, "%s-control%d" % (name, rank)),
                      ISCHED_CHECKPOINT_DIR=os.path.join(out, name + "-ckpt"))
    import lightning.pytorch as pl

    import isched
    import isched.lightning as ilt

    isched.CONTROL_POLL_SECONDS = 0
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, 4, generator=g)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True).tanh()), batch_size=per_rank)
    kw = ilt.trainer_kwargs(global_batch, per_rank)
    trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=out,
                         callbacks=[requester(pl, at), ilt.IschedCallback()], **kw)
    model = module_class(pl)()
    trainer.fit(model, data, ckpt_path=ilt.resume_ckpt_path())
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    with open(os.path.join(out, "%s-rank%d.json" % (name, rank)), "w") as f:
        json.dump({"steps": model.record, "weights": weights, "global_step": trainer.global_step,
                   "world_size": trainer.world_size, "kwargs": kw}, f)
    if torch.distributed.is_initialized():
        # else gloo's threads may abort the exit ("terminate called without
        # an active exception", SIGABRT: seen once in CI run 28)
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    o, n, e, a, gb, b = sys.argv[1:7]
    main(o, n, int(e), int(a), int(gb), int(b))

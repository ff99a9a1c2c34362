"""One rank of test_elastic.py's Hugging Face Trainer runs (DDP over gloo
on the CPU when WORLD_SIZE > 1, the ranks started as isched-wrapper starts
them).

    python3 elastic_hf_worker.py OUT NAME MAX_STEPS REQUEST_AT GLOBAL_BATCH BATCH_PER_RANK

gradient_accumulation_steps is isched.accumulation(GLOBAL_BATCH, ...); the
real IschedCallback; resume through isched.hf.resume_from_checkpoint(); a
checkpoint asked for (each rank's control file) once global_step reaches
REQUEST_AT (0: never), and the run stops there as after a requeue. Each
rank writes OUT/NAME-rank<R>.json: per optimizer step [step, samples this
rank put into it], global_step and world_size.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

from compat import cpu_map_location  # noqa: E402

N = 32


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.lin = torch.nn.Linear(4, 2)
        self.pending = 0

    def forward(self, x, labels=None):
        self.pending += len(x)
        logits = self.lin(x)
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


def main(out, name, max_steps, at, global_batch, per_rank):
    rank = int(os.environ.get("RANK", "0"))
    os.environ.update(ISCHED_PROGRESS_FILE=os.path.join(out, name + "-progress"),
                      ISCHED_CONTROL_FILE=os.path.join(out, "%s-control%d" % (name, rank)),
                      ISCHED_CHECKPOINT_DIR=os.path.join(out, name + "-ckpt"))
    from transformers import Trainer, TrainerCallback, TrainingArguments

    import isched
    import isched.hf as ihf

    isched.CONTROL_POLL_SECONDS = 0
    if torch.__version__.split(".")[0] == "1":
        cpu_map_location()
    model, record = M(), []

    class Probe(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            record.append([state.global_step, model.pending])
            model.pending = 0
            if state.global_step == at:
                with open(os.environ["ISCHED_CONTROL_FILE"], "w") as f:
                    f.write("checkpoint\n")

        def on_save(self, args, state, control, **kw):
            control.should_training_stop = True  # the attempt ends with its checkpoint

    g = torch.Generator().manual_seed(0)
    xs, ys = torch.randn(N, 4, generator=g), torch.randint(0, 2, (N,), generator=g)
    args = TrainingArguments(output_dir=os.path.join(out, name + "-out"), max_steps=max_steps,
                             per_device_train_batch_size=per_rank,
                             gradient_accumulation_steps=isched.accumulation(global_batch, per_rank),
                             use_cpu=True, ddp_backend="gloo", save_strategy="no", report_to=[], disable_tqdm=True,
                             seed=0, logging_strategy="no")
    trainer = Trainer(model=model, args=args, train_dataset=[{"x": xs[i], "labels": ys[i]} for i in range(N)],
                      callbacks=[Probe(), ihf.IschedCallback()])
    trainer.train(resume_from_checkpoint=ihf.resume_from_checkpoint())
    with open(os.path.join(out, "%s-rank%d.json" % (name, rank)), "w") as f:
        json.dump({"steps": record, "global_step": trainer.state.global_step, "world_size": args.world_size}, f)


if __name__ == "__main__":
    o, n, s, a, gb, b = sys.argv[1:7]
    main(o, n, int(s), int(a), int(gb), int(b))

"""One rank of test_distributed.py's two-process torch.distributed group.

    python3 dist_worker.py hf|lightning RANK WORLD INIT_FILE OUT_DIR REQUEST_AT

Joins a gloo group (init_method file://INIT_FILE), runs a short training on
a stand-in trainer with the real isched callback, asking for a checkpoint
through this rank's own control file before optimizer step REQUEST_AT + 1
(0: never), and writes OUT_DIR/rank<RANK>.json: each save decision as
[global_step, this rank's request, the decision every rank took], and the
steps it saved at. The decision goes through the real collective: hf through
isched.hf._torch_agree (torch.distributed.broadcast_object_list), lightning
through the real Lightning DDPStrategy.broadcast the callback calls.
"""

import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def request(path):
    """The wrapper's checkpoint request: a new version of the control file."""
    with open(path, "w") as f:
        f.write("checkpoint\n")
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def main(mode, rank, world, init_file, out, request_at):
    os.environ.update(RANK=str(rank), ISCHED_PROGRESS_FILE=os.path.join(out, "progress%d" % rank),
                      ISCHED_CONTROL_FILE=os.path.join(out, "control%d" % rank),
                      ISCHED_CHECKPOINT_DIR=os.path.join(out, "ckpt%d" % rank))
    os.makedirs(os.environ["ISCHED_CHECKPOINT_DIR"])
    import torch.distributed as dist

    # the timeout bounds every collective: a rank left alone fails, never hangs
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=30))
    import isched

    isched.CONTROL_POLL_SECONDS = 0
    import standins as si

    decisions = []
    control = os.environ["ISCHED_CONTROL_FILE"]
    if mode == "hf":
        import isched.hf as ihf

        cb = ihf.IschedCallback()  # agree=_torch_agree, the default
        real = cb.driver.agree
        assert real is ihf._torch_agree

        def on_step(trainer, step):
            if trainer.state.global_step == request_at:
                request(control)
        t = si.HFTrainer(si.TrainingArguments(os.path.join(out, "out%d" % rank), num_train_epochs=1), [cb],
                         steps_in_epoch=4, on_step=on_step)
        t.state.is_world_process_zero = rank == 0

        def agree(decision):
            agreed = real(decision)
            decisions.append([t.state.global_step, bool(decision), bool(agreed)])
            return agreed
        cb.driver.agree = agree
        t.train()
        saves = [int(os.path.basename(d).split("-")[1]) for d in t.saved]
    else:
        from lightning.pytorch.strategies import DDPStrategy

        import isched.lightning as ilt

        def on_batch(trainer, i):
            if trainer.global_step == request_at:
                request(control)
        t = si.LightningTrainer([ilt.IschedCallback()], max_epochs=1, batches=4, default_root_dir=out, world_size=world,
                                is_global_zero=rank == 0, on_batch=on_batch)
        strategy = DDPStrategy()
        real = strategy.broadcast

        def broadcast(obj, src=0):
            agreed = real(obj, src)
            decisions.append([t.global_step, bool(obj), bool(agreed)])
            return agreed
        strategy.broadcast = broadcast
        t.strategy = strategy
        t.fit()
        saves = [e[2] for e in t.events if e[0] == "save"]
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
        json.dump({"decisions": decisions, "saves": saves}, f)


if __name__ == "__main__":
    m, r, w, init, o, at = sys.argv[1:7]
    main(m, int(r), int(w), init, o, int(at))

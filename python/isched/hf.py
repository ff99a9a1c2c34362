"""isched for the Hugging Face Trainer: a TrainerCallback.

    from transformers import Trainer, TrainingArguments
    from isched.hf import IschedCallback, resume_from_checkpoint

    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[IschedCallback()])
    trainer.train(resume_from_checkpoint=resume_from_checkpoint())

From the Trainer's hooks (order as in transformers 4.4x,
Trainer._inner_training_loop: the checkpoint's trainer_state.json is loaded,
then on_train_begin; per epoch on_epoch_begin; per optimizer step
on_step_begin (the handler resets control.should_save first), the step,
state.global_step += 1, on_step_end, then _maybe_log_save_evaluate: when
control.should_save, _save_checkpoint writes <output_dir>/checkpoint-<step>
and on_save is called; control.should_training_stop ends the loop; then
on_train_end):

- on_train_begin: the known total (state.max_steps, state.num_train_epochs)
  and, when the Trainer resumed (state.global_step > 0), a resume line;
- on_step_end: a progress line with state.global_step; when the wrapper asks
  for a checkpoint (its control file, or SIGUSR1/SIGTERM caught by the
  handlers this callback installs), control.should_save = True, so the
  Trainer saves with its own _save_checkpoint right after this hook; after
  SIGTERM also control.should_training_stop = True;
- on_save: the Trainer's checkpoint is a directory; the wrapper confirms and
  resumes from regular files, so a small pointer file
  isched-hf-checkpoint-<step>.json naming it is written atomically to
  ISCHED_CHECKPOINT_DIR (else beside the checkpoint) and reported. On the
  next attempt the wrapper exports it as ISCHED_RESUME_FROM and
  resume_from_checkpoint() turns it back into the directory.

Distributed: the save decision is rank 0's, broadcast with
torch.distributed when it is initialised (every rank must save together).

transformers is imported if present; without it the class is a plain object
with the same hooks (for tests).
"""

import json
import os
import signal

import isched as core
from isched._driver import Driver, checkpoint_dir

try:
    from transformers import TrainerCallback as _Base

    FRAMEWORK = "transformers"
except ImportError:  # pragma: no cover - depends on the machine
    _Base = object
    FRAMEWORK = None

__all__ = ["IschedCallback", "resume_from_checkpoint", "POINTER_PREFIX"]

POINTER_PREFIX = "isched-hf-checkpoint-"
STATE_FILE = "isched.json"  # in a checkpoint directory: the step and the samples seen by it
CHECKPOINT_PREFIX = "checkpoint"  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR

_resumed_from = None


def read_pointer(path):
    """The checkpoint directory a pointer file names, or None."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        d = data.get("checkpoint") if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None
    if isinstance(d, str) and os.path.isabs(d) and os.path.isdir(d):
        return d
    return None


def resume_from_checkpoint():
    """The checkpoint directory for trainer.train(resume_from_checkpoint=...),
    or None to start fresh: ISCHED_RESUME_FROM when it is one of this
    callback's pointer files (or a checkpoint directory itself)."""
    global _resumed_from
    p = os.environ.get("ISCHED_RESUME_FROM")
    if not p:
        return None
    d = p if os.path.isdir(p) else read_pointer(p) if os.path.isfile(p) else None
    if d is None:
        core._warn("hf-resume", "ISCHED_RESUME_FROM=%s names no Trainer checkpoint; starting fresh" % p)
    _resumed_from = d
    return d


def _torch_agree(decision):
    try:
        import torch.distributed as dist  # noqa: PLC0415 - only with a Trainer
    except ImportError:
        return decision
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return decision
    box = [bool(decision)]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _global_batch(args):
    try:
        return args.train_batch_size * args.gradient_accumulation_steps * args.world_size
    except (AttributeError, TypeError):
        return None


def _saved_samples(directory, step):
    """The samples a checkpoint directory's isched.json recorded at `step`."""
    try:
        with open(os.path.join(directory, STATE_FILE), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, TypeError, ValueError):
        return None
    if isinstance(data, dict) and data.get("step") == step and isinstance(data.get("samples"), int):
        return data["samples"]
    return None


def _write_state(directory, step, samples):
    if samples is None:
        return
    path = os.path.join(directory, STATE_FILE)
    with open(path + ".tmp", "w", encoding="utf-8") as f:  # not a checkpoint: not reported
        json.dump({"step": step, "samples": samples}, f)
    os.replace(path + ".tmp", path)


class IschedCallback(_Base):
    """Report progress and checkpoints to isched and save when it asks.

    pointer_dir: where pointer files go when ISCHED_CHECKPOINT_DIR is unset
    (default: beside the checkpoint). handle_signals: install isched's
    SIGUSR1/SIGTERM handlers at on_train_begin (the Trainer installs none);
    SIGTERM then saves and stops instead of killing the process.
    global_batch: samples per optimizer step (default: per-device batch x
    gradient_accumulation_steps x world size); step lines carry samples=,
    counted on from the samples the resumed checkpoint's isched.json
    recorded, so they stay right at another world size or global batch.
    """

    def __init__(self, pointer_dir=None, handle_signals=True, agree=_torch_agree, global_batch=None):
        super().__init__()
        self.global_batch = global_batch
        self.pointer_dir = pointer_dir
        self.handle_signals = handle_signals
        self.driver = Driver(agree=agree)
        self.pointers = []
        self._prev = {}

    def on_train_begin(self, args, state, control, **kwargs):
        self.driver.describe(total=state.max_steps, epochs=getattr(state, "num_train_epochs", None))
        if state.global_step > 0:
            core.resumed(state.global_step, _resumed_from)
        self.driver.last_step = state.global_step
        self.driver.count_samples(self.global_batch or _global_batch(args), state.global_step,
                                  _saved_samples(_resumed_from, state.global_step))
        if self.handle_signals and not self._prev:
            sigs = (signal.SIGUSR1, signal.SIGTERM)
            self._prev = {s: signal.getsignal(s) for s in sigs}
            if not core.install_signal_handlers(signals=sigs):
                self._prev = {}

    def on_step_end(self, args, state, control, **kwargs):
        epoch = int(state.epoch) if state.epoch is not None else None
        self.driver.step(state.global_step, epoch=epoch)
        stop = core.stop_requested()
        if self.driver.should_save(extra=stop and not control.should_training_stop):
            control.should_save = True
        if stop:
            control.should_training_stop = True
        return control

    def on_save(self, args, state, control, **kwargs):
        d = os.path.join(os.path.abspath(args.output_dir), "%s-%d" % (CHECKPOINT_PREFIX, state.global_step))
        if not state.is_world_process_zero or not os.path.isdir(d):
            return control
        _write_state(d, state.global_step, self.driver.samples(state.global_step))
        where = checkpoint_dir(self.pointer_dir or os.path.dirname(d))
        os.makedirs(where, exist_ok=True)
        pointer = os.path.join(where, "%s%d.json" % (POINTER_PREFIX, state.global_step))
        body = json.dumps({"checkpoint": d, "step": state.global_step}).encode()

        def write(tmp):
            with open(tmp, "wb") as f:
                f.write(body)

        core.save(write, pointer, step=state.global_step)
        self.pointers.append(pointer)
        self.driver.saves += 1
        return control

    def on_train_end(self, args, state, control, **kwargs):
        for s, h in self._prev.items():
            try:
                signal.signal(s, h if h is not None else signal.SIG_DFL)
            except (ValueError, TypeError):
                pass
        self._prev = {}
        return control

"""isched for PyTorch Lightning: a Callback.

    import lightning.pytorch as pl
    from isched.lightning import IschedCallback, resume_ckpt_path

    trainer = pl.Trainer(max_epochs=3, callbacks=[IschedCallback()])
    trainer.fit(model, data, ckpt_path=resume_ckpt_path(trainer.default_root_dir))

What it does, from Lightning's own hooks (order as in Lightning 2.x:
trainer.fit -> _run: setup, on_fit_start, checkpoint restore, signal
handlers registered, on_train_start, then per batch on_train_batch_start ...
optimizer_step ... on_train_batch_end, and the SIGTERM check right after
on_train_batch_end in _TrainingEpochLoop.on_advance_end):

- on_train_start: the known total (trainer.estimated_stepping_batches, the
  epochs and the optimizer steps per epoch), and a resume line when the fit
  restored a checkpoint (trainer.global_step > 0, trainer.ckpt_path);
- on_train_batch_end: a progress line each time trainer.global_step moves
  (optimizer steps, so gradient accumulation is counted right); when the
  wrapper asks for a checkpoint (its control file, or SIGUSR1 when isched
  owns that signal), a save through trainer.save_checkpoint at the next
  optimizer-step boundary, written to <dir>/<filename>.tmp and renamed, so
  the checkpoint the wrapper confirms is never half written; the
  checkpoints Lightning's ModelCheckpoint callbacks wrote are reported too;
- a SIGTERM Lightning caught (trainer.received_sigterm: preemption, scancel,
  a requeue) is answered with a save before Lightning stops the fit.

<dir> is ISCHED_CHECKPOINT_DIR (the directory the wrapper watches and
resumes from), else dirpath, else trainer.default_root_dir.

Lightning's SLURM auto-requeue, both settings:

- SLURMEnvironment(auto_requeue=True) (Lightning's default under Slurm):
  Lightning registers its own SIGUSR1 handler (save hpc_ckpt_N.ckpt in
  default_root_dir, then `scontrol requeue`), but only if SIGUSR1 has no
  handler yet. This callback then installs none, so Lightning's stays in
  charge of that signal and the two never both answer it. isched's own
  requests do not come as SIGUSR1: `isched submit` runs the wrapper with
  --checkpoint-signal file, so the wrapper turns every SIGUSR1 (isched's, and
  Slurm's --signal=USR1@120 before the time limit) into the control file,
  which only this callback reads: no Lightning requeue under isched. Run by
  hand without --checkpoint-signal file, a SIGUSR1 reaches Lightning, which
  saves and requeues in place; resume_ckpt_path() then picks the newer of
  Lightning's hpc checkpoint and isched's.
- auto_requeue=False (or not on Slurm): Lightning leaves SIGUSR1 alone; the
  callback turns it into a checkpoint request (instead of the default
  action, which kills the process), chaining any Python handler set before.

Distributed: every rank must run the callback (Lightning runs callbacks on
all ranks); the save decision is rank 0's, broadcast by the strategy when
trainer.world_size > 1 (one small collective per training batch), because
trainer.save_checkpoint is itself a collective. Sharded strategies that write
a checkpoint directory (FSDP, DeepSpeed) are saved and reported too, but the
wrapper resumes only from regular files: use a full-state checkpoint there.

Lightning is imported if present (lightning.pytorch, else pytorch_lightning);
without it the class is a plain object with the same hooks (for tests).
"""

import glob
import math
import os
import shutil
import signal

import isched as core
from isched._driver import Driver, checkpoint_dir

try:  # Lightning 2.x
    from lightning.pytorch.callbacks import Callback as _Base

    FRAMEWORK = "lightning"
except ImportError:  # pragma: no cover - depends on the machine
    try:
        from pytorch_lightning.callbacks import Callback as _Base

        FRAMEWORK = "pytorch_lightning"
    except ImportError:
        _Base = object
        FRAMEWORK = None

__all__ = ["IschedCallback", "resume_ckpt_path", "lightning_requeues", "trainer_kwargs"]

STATE_KEY = "isched"  # the checkpoint's entry: step, samples, world_size, accumulate_grad_batches


def trainer_kwargs(global_batch, batch_per_rank):
    """pl.Trainer's devices, num_nodes and accumulate_grad_batches for this
    attempt's world (isched.world(); LOCAL_WORLD_SIZE ranks per node, all of
    them when unset), keeping global_batch samples per optimizer step::

        trainer = pl.Trainer(callbacks=[IschedCallback()], **trainer_kwargs(256, 32))
    """
    _, size, _ = core.world()
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or 0) or size
    if local < 1 or size % local:
        raise ValueError("LOCAL_WORLD_SIZE=%d does not divide WORLD_SIZE=%d" % (local, size))
    return {"devices": local, "num_nodes": size // local,
            "accumulate_grad_batches": core.accumulation(global_batch, batch_per_rank, size)}


def realign_epoch(checkpoint, accumulate, world_size):
    """Restate a checkpoint's position in its epoch for this attempt's
    world size and accumulation, the same as the saving attempt's or not;
    True when it did.

    Lightning counts the epoch's progress in this rank's batches, which
    means another number of optimizer steps at another world size or
    accumulation, and may end a step after a partial accumulation. At the
    same size too: IschedCallback saves in on_train_batch_end, before
    Lightning counts the step's last batch completed, and Lightning
    resumes from the completed count, so the first step after the resume
    would take one micro-batch only (and the epoch one step more). The
    position becomes the epoch's samples done (optimizer steps x the old
    global batch, the batch per rank assumed unchanged) in whole optimizer
    steps of the new global batch (rounded up), in the new accumulation's
    batches (checkpoint["loops"], before Lightning restores them).
    """
    saved = checkpoint.get(STATE_KEY) or {}
    old, old_world = saved.get("accumulate_grad_batches"), saved.get("world_size")
    if not old or not old_world:
        return False
    if _epoch_done(checkpoint):
        return True
    try:
        progress = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]
        current, total = progress["current"], progress["total"]
        micro = math.ceil(current["ready"] / old) * old * old_world  # the epoch's micro-batches, all ranks
    except (KeyError, TypeError):
        return False
    target = math.ceil(micro / (accumulate * world_size)) * accumulate
    for field in ("ready", "started", "processed", "completed"):
        total[field] += target - current[field]
        current[field] = target
    return True



def _epoch_done(checkpoint):
    """Restate a checkpoint saved at its epoch's last batch as one saved at
    the epoch's end; True when it did. Restated in batches instead, the
    epoch would look finished to the batch loop but not to the fit loop,
    and Lightning would run one more batch in it and step on that alone
    (a step of one micro-batch). Lightning's own epoch-end checkpoints
    count the epoch processed: it then starts the next epoch afresh, at
    any world size."""
    try:
        fit = checkpoint["loops"]["fit_loop"]
        if not fit["epoch_loop.batch_progress"].get("is_last_batch"):
            return False
        epochs = fit["epoch_progress"]
        for part in ("current", "total"):
            epochs[part]["processed"] = epochs[part]["started"]
    except (KeyError, TypeError, AttributeError):
        return False
    return True


def lightning_requeues(trainer):
    """(True, signal) when Lightning's SLURM auto-requeue is on for this
    trainer: its cluster environment is a SLURMEnvironment with
    auto_requeue=True. Lightning then handles that signal itself."""
    env = None
    for holder in (getattr(trainer, "_accelerator_connector", None), getattr(trainer, "strategy", None)):
        env = getattr(holder, "cluster_environment", None)
        if env is not None:
            break
    if env is None or type(env).__name__ != "SLURMEnvironment":
        return False, None
    if not getattr(env, "auto_requeue", False):
        return False, None
    return True, getattr(env, "requeue_signal", None) or signal.SIGUSR1


def _mtime(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def resume_ckpt_path(root_dir=None):
    """The checkpoint for trainer.fit(ckpt_path=...), or None to start fresh.

    ISCHED_RESUME_FROM (set by the wrapper on a new attempt of the job) when
    it is a file; when root_dir (the trainer's default_root_dir) holds a newer
    hpc_ckpt_N.ckpt of Lightning's own auto-requeue, that one.
    """
    ours = core.resume_path()
    hpc = None
    if root_dir:
        found = [p for p in glob.glob(os.path.join(os.fspath(root_dir), "hpc_ckpt_*.ckpt")) if os.path.isfile(p)]
        if found:
            hpc = max(found, key=lambda p: (_mtime(p) or 0, p))
    if ours and hpc:
        return hpc if (_mtime(hpc) or 0) > (_mtime(ours) or 0) else ours
    return ours or hpc


class IschedCallback(_Base):
    """Report progress and checkpoints to isched and save when it asks.

    dirpath: where requested checkpoints go when ISCHED_CHECKPOINT_DIR is
    unset (default trainer.default_root_dir). filename: their name; "{step}"
    is replaced by the global step (default one file, replaced each time; the
    wrapper keeps the lineage's last five confirmed versions by path).
    handle_signals: turn SIGUSR1 into a request when Lightning does not own
    it (see the module doc). save_on_sigterm: save when Lightning caught a
    SIGTERM, before it stops. global_batch: samples per optimizer step
    (default: the train loader's batch_size x accumulate_grad_batches x
    world_size); progress lines then carry samples=, counted on from the
    samples a checkpoint recorded, so they stay right when a resumed attempt
    runs another world size or global batch.
    """

    def __init__(self, dirpath=None, filename="isched-last.ckpt", handle_signals=True, save_on_sigterm=True,
                 global_batch=None):
        super().__init__()
        self.global_batch = global_batch
        self._loaded = {}
        self.dirpath = dirpath
        self.filename = filename
        self.handle_signals = handle_signals
        self.save_on_sigterm = save_on_sigterm
        self.driver = Driver()
        self.lightning_owns_usr1 = False
        self.saved_paths = []
        self._sigterm_saved = False
        self._prev_usr1 = None
        self._installed = False

    # -- hooks, in Lightning's order --------------------------------------

    def on_fit_start(self, trainer, pl_module):
        requeues, sig = lightning_requeues(trainer)
        self.lightning_owns_usr1 = requeues and sig == signal.SIGUSR1
        if getattr(trainer, "world_size", 1) > 1:
            strategy = trainer.strategy
            self.driver.agree = lambda decision: strategy.broadcast(decision, src=0)
        # Before Lightning registers its handlers (after on_fit_start): a
        # handler of ours on SIGUSR1 would stop Lightning from installing its
        # requeue handler, so none when it wants the signal.
        if self.handle_signals and not self.lightning_owns_usr1 and not self._installed:
            self._prev_usr1 = signal.getsignal(signal.SIGUSR1)
            self._installed = core.install_signal_handlers(signals=(signal.SIGUSR1,))

    def on_train_start(self, trainer, pl_module):
        epochs = getattr(trainer, "max_epochs", None)
        if getattr(trainer, "max_steps", -1) not in (None, -1):
            epochs = None  # max_steps bounds the run, not the epochs
        per_epoch = None
        nb = getattr(trainer, "num_training_batches", None)
        acc = getattr(trainer, "accumulate_grad_batches", 1) or 1
        try:
            if nb is not None and math.isfinite(float(nb)):
                per_epoch = int(math.ceil(float(nb) / acc))
        except (TypeError, ValueError):
            per_epoch = None
        try:
            total = trainer.estimated_stepping_batches
        except Exception:  # noqa: BLE001 - an infinite iterable loader, say
            total = None
        self.driver.describe(total=total, epochs=epochs, steps_per_epoch=per_epoch)
        step = int(getattr(trainer, "global_step", 0) or 0)
        if step > 0:
            ckpt = getattr(trainer, "ckpt_path", None)
            core.resumed(step, ckpt if ckpt and os.path.exists(ckpt) else None)
        self.driver.last_step = step
        loaded = self._loaded if self._loaded.get("step") == step else {}
        self.driver.count_samples(self._global_batch(trainer), step, loaded.get("samples"))

    def _global_batch(self, trainer):
        if self.global_batch:
            return self.global_batch
        loader = getattr(trainer, "train_dataloader", None)
        per_rank = getattr(loader, "batch_size", None)
        if not per_rank:
            return None
        return per_rank * (getattr(trainer, "accumulate_grad_batches", 1) or 1) * (getattr(trainer, "world_size", 1) or 1)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        step = trainer.global_step
        checkpoint[STATE_KEY] = {"step": step, "samples": self.driver.samples(step), "world_size": trainer.world_size,
                                 "accumulate_grad_batches": trainer.accumulate_grad_batches}

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        self._loaded = dict(checkpoint.get(STATE_KEY) or {})
        realign_epoch(checkpoint, trainer.accumulate_grad_batches, trainer.world_size)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *args):
        boundary = self.driver.step(trainer.global_step, epoch=getattr(trainer, "current_epoch", None))
        self._report_lightning_saves(trainer)
        sigterm = bool(getattr(trainer, "received_sigterm", False)) and self.save_on_sigterm and not self._sigterm_saved
        # Lightning raises SIGTERMException right after this hook: save now,
        # mid-accumulation or not.
        if self.driver.should_save(boundary=boundary or sigterm, extra=sigterm):
            self._sigterm_saved = self._sigterm_saved or sigterm
            self.save(trainer)

    def on_train_epoch_end(self, trainer, pl_module):
        self._report_lightning_saves(trainer)

    def on_validation_end(self, trainer, pl_module):
        self._report_lightning_saves(trainer)

    def on_train_end(self, trainer, pl_module):
        self._report_lightning_saves(trainer)

    def teardown(self, trainer, pl_module, stage):
        self._report_lightning_saves(trainer)
        if self._installed:
            try:
                signal.signal(signal.SIGUSR1, self._prev_usr1 if self._prev_usr1 is not None else signal.SIG_DFL)
            except (ValueError, TypeError):
                pass
            self._installed = False

    # -- saving -------------------------------------------------------------

    def checkpoint_path(self, trainer):
        d = checkpoint_dir(self.dirpath or getattr(trainer, "default_root_dir", None) or os.getcwd())
        return os.path.join(d, self.filename.format(step=trainer.global_step))

    def save(self, trainer):
        """Save through trainer.save_checkpoint (on every rank: it is a
        collective) to a .tmp name, then rename it on global rank 0 and
        report it."""
        final = self.checkpoint_path(trainer)
        tmp = final + ".tmp"
        if getattr(trainer, "is_global_zero", True):
            os.makedirs(os.path.dirname(final) or ".", exist_ok=True)
        trainer.save_checkpoint(tmp)
        if not getattr(trainer, "is_global_zero", True):
            return None
        if os.path.isdir(tmp):  # a sharded strategy's directory
            if os.path.isdir(final):
                shutil.rmtree(final)
        elif not os.path.isfile(tmp):
            core._warn("lightning-save", "trainer.save_checkpoint wrote nothing at %s" % tmp)
            return None
        else:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, final)
        self.saved_paths.append(final)
        self.driver.saved(final, step=trainer.global_step)
        return final

    def _report_lightning_saves(self, trainer):
        """Report what Lightning's ModelCheckpoint callbacks wrote."""
        for cb in getattr(trainer, "checkpoint_callbacks", None) or []:
            paths = [getattr(cb, "last_model_path", ""), getattr(cb, "best_model_path", "")]
            paths += list((getattr(cb, "best_k_models", None) or {}).keys())
            for p in paths:
                if p and os.path.isfile(p):
                    self.driver.saved(p)

"""What the framework callbacks share (isched.lightning, isched.hf).

A Driver turns a trainer's hooks into the core's calls: a progress line when
the optimizer step count moves, a save decision when the wrapper asks (agreed
between distributed ranks, decided on rank 0), a checkpoint line per saved
path, once, and a resume line when training starts past step 0. It imports
no framework, so it is tested on its own.
"""

import math
import os

import isched as core


def finite_count(v):
    """v as an int when it is a finite count > 0 (totals may be inf or -1)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    if math.isnan(f) or math.isinf(f) or f <= 0:
        return None
    return int(f)


class Driver:
    """Framework-neutral state of one isched callback.

    agree(decision) -> bool makes every rank take rank 0's decision (a
    collective: every rank must call it at the same point); None on one
    process.
    """

    def __init__(self, agree=None):
        self.agree = agree
        self.last_step = None
        self.total = None
        self.epochs = None
        self.steps_per_epoch = None
        self.reported_paths = set()
        self.pending = False  # a request seen, not yet answered with a save
        self.saves = 0
        self.global_batch = None  # samples per optimizer step in this attempt
        self.base = (0, 0)  # (step, samples) this attempt started from

    def count_samples(self, global_batch, step, samples=None):
        """Count samples from `step` on, global_batch per optimizer step.

        samples: those seen by `step` (a checkpoint's record, of another
        world size or global batch); default step x global_batch, right when
        the global batch never changed. No global batch: no samples.
        """
        self.global_batch = finite_count(global_batch)
        step = int(step or 0)
        if samples is None:
            samples = step * (self.global_batch or 0)
        self.base = (step, int(samples))

    def samples(self, step):
        """Global samples seen by optimizer step `step`, or None unknown."""
        if self.global_batch is None or step is None:
            return None
        return self.base[1] + (int(step) - self.base[0]) * self.global_batch

    def describe(self, total=None, epochs=None, steps_per_epoch=None):
        """The run's known size, sent with every step line."""
        self.total = finite_count(total)
        self.epochs = finite_count(epochs)
        self.steps_per_epoch = finite_count(steps_per_epoch)

    def step(self, step, epoch=None):
        """Report `step` if it moved; True when it did (an optimizer step
        boundary: saving there loses no accumulated gradient)."""
        if step is None or step == self.last_step:
            return False
        self.last_step = int(step)
        core.step(self.last_step, epoch=epoch, samples=self.samples(self.last_step), total=self.total,
                  epochs=self.epochs, steps_per_epoch=self.steps_per_epoch)
        return True

    def should_save(self, boundary=True, extra=False):
        """True when a save is due now: the wrapper asked (control file or a
        caught signal), or `extra` (a framework's own stop signal), and the
        loop is at an optimizer step boundary. A request seen mid-accumulation
        is kept for the next boundary."""
        asked = core.should_checkpoint() or bool(extra)
        if self.agree is not None:
            asked = bool(self.agree(asked))
        if asked:
            self.pending = True
        if self.pending and boundary:
            self.pending = False
            return True
        return False

    def saved(self, path, step=None):
        """Report a checkpoint the trainer finished writing (once per path
        and step)."""
        if not path:
            return
        path = os.path.abspath(os.fspath(path))
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:
            mtime = None
        # a path saved again (last.ckpt) is a new checkpoint: its mtime moved
        key = (path, step, mtime)
        if key in self.reported_paths:
            return
        self.reported_paths.add(key)
        self.saves += 1
        core.checkpoint(path, step=step)


def resume_file():
    """ISCHED_RESUME_FROM when it names an existing file or directory."""
    p = os.environ.get("ISCHED_RESUME_FROM")
    if p and os.path.exists(p):
        return p
    return None


def checkpoint_dir(default=None):
    """Where isched-requested checkpoints go: ISCHED_CHECKPOINT_DIR (the
    directory the wrapper watches and resumes from), else `default`."""
    return os.environ.get("ISCHED_CHECKPOINT_DIR") or default

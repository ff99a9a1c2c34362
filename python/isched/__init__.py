"""isched training-loop helper (standard library only, Python >= 3.8).

Install it (``pip install ./python``, see python/README.md for the ways
without pip), or put scripts/isched.py next to your training script or on
PYTHONPATH (a thin loader of this file), then::

    import isched

    isched.install_signal_handlers()          # optional: SIGUSR1/SIGTERM -> checkpoint request
    start = 0
    if isched.resume_path():
        start = load(isched.resume_path())
        isched.resumed(start, isched.resume_path())
    for step in range(start, total):
        loss = train_step()
        isched.step(step + 1, epoch=epoch, loss=loss, total=total)
        if isched.should_checkpoint():
            isched.save(lambda p: torch.save(state, p), f"ckpt/step{step + 1}.pt", step=step + 1)
        if isched.stop_requested():
            break

Without the isched wrapper (no ISCHED_* variables) every function is a cheap
no-op or returns a sane default, so a script can use it unconditionally.

The reporting functions never raise into the training loop: a failure is
reported once on stderr and reporting is switched off. ``save`` is the
exception: if your saver fails, you need to know, so its error propagates.

Environment (set by isched-wrapper):

ISCHED_PROGRESS_FILE   progress lines are appended here (format below)
ISCHED_CONTROL_FILE    exists while the wrapper asks for a checkpoint
ISCHED_RESUME_FROM     checkpoint to resume from
ISCHED_DEVICE          device to train on ("cuda", "cuda:1", "cpu", ...)
ISCHED_ALL_RANKS       "1": report from every distributed rank, not only rank 0

Line format (must match internal/progress in Go; version prefix "isched1")::

    isched1 step=<int> [epoch=<int>] [samples=<int>] [loss=<float|nan|inf>] [t=<unix float>] [total=<int>] [epochs=<int>] [steps_per_epoch=<int>]
    isched1 ckpt path=<percent-escaped path> [step=<int>] [epoch=<int>] [t=<unix float>]
    isched1 resume step=<int> [path=<percent-escaped path>] [epoch=<int>] [t=<unix float>]

The user's side (a notebook, a script): ``isched.summarize(model, (3, 224,
224))`` (isched.summary: the model summary, torch imported then), and
``isched.estimate``, ``plan``, ``submit``, ``status``, ``follow``, ``report``
(isched.cli: they run the isched command with --json; ``parse_time`` reads
its RFC 3339 times), ``table2``,
``migration_plans``, ``format_table`` (isched.tables); ``Job``, ``jobs``,
``Executor`` (isched.runs: a submitted run as an object, and Python
functions as jobs). They are loaded on first
use, so a training loop's ``import isched`` stays cheap.

Frameworks: isched.lightning.IschedCallback (PyTorch Lightning) and
isched.hf.IschedCallback (Hugging Face Trainer) drive these functions from the
trainers' own hooks; neither framework is imported by this module.

Distributed training: only rank 0 (RANK / SLURM_PROCID unset or 0) writes
progress lines unless ISCHED_ALL_RANKS=1. should_checkpoint() is evaluated
per process, at slightly different moments: if every rank must take part in
the save, decide on rank 0 and broadcast the decision.
"""

import importlib
import math
import os
import signal
import stat
import sys
import threading
import time
import urllib.parse

# The user's side, loaded on first use (PEP 562): importing isched in a
# training loop must not import subprocess, json or, through the summary,
# torch. They are left out of __all__ for the same reason.
_LAZY = {
    "summarize": "summary",
    "SummaryError": "summary",
    "estimate": "cli",
    "plan": "cli",
    "submit": "cli",
    "status": "cli",
    "follow": "cli",
    "report": "cli",
    "CLIError": "cli",
    "cli_path": "cli",
    "parse_time": "cli",
    "Job": "runs",
    "FunctionJob": "runs",
    "Executor": "runs",
    "JobError": "runs",
    "jobs": "runs",
    "table2": "tables",
    "migration_plans": "tables",
    "format_table": "tables",
}


def __getattr__(name):
    # Absolute imports: scripts/isched.py runs this file as a plain module
    # whose __path__ points at the package directory.
    if name in _LAZY.values():
        return importlib.import_module("isched." + name)  # isched.cli before "import isched.cli"
    sub = _LAZY.get(name)
    if sub is None:
        raise AttributeError("module 'isched' has no attribute %r" % name)
    return getattr(importlib.import_module("isched." + sub), name)


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "step",
    "checkpoint",
    "resumed",
    "save",
    "should_checkpoint",
    "stop_requested",
    "install_signal_handlers",
    "resume_path",
    "device",
    "world",
    "accumulation",
    "global_batches",
    "rank_batches",
]

__version__ = "0.1.0"

VERSION = "isched1"
MAX_LINE = 4096  # bytes, without the newline; longer lines are dropped by the reader

# Seconds between two looks at the control file: should_checkpoint() is called
# every step and a stat on a network file system is not free.
CONTROL_POLL_SECONDS = 1.0

_lock = threading.Lock()
_fd = None  # progress file descriptor, opened on first use
_disabled = False  # reporting switched off after a failure
_warned = set()
_last_step = None
_last_epoch = None

_request_signal = False  # a handled signal asked for a checkpoint
_stop_signal = False  # SIGTERM/SIGINT seen
_control_seen = None  # identity of the control file version last consumed
_control_checked = float("-inf")


def _warn(key, msg):
    if key in _warned:
        return
    _warned.add(key)
    try:
        sys.stderr.write("isched: %s\n" % msg)
        sys.stderr.flush()
    except Exception:
        pass


def _reporting_rank():
    if os.environ.get("ISCHED_ALL_RANKS") == "1":
        return True
    for var in ("RANK", "SLURM_PROCID"):
        v = os.environ.get(var)
        if v not in (None, "", "0"):
            return False
    return True


def _open():
    """Return the progress fd, opening it on first use; None when off."""
    global _fd, _disabled
    if _fd is not None or _disabled:
        return _fd
    path = os.environ.get("ISCHED_PROGRESS_FILE")
    if not path or not _reporting_rank():
        _disabled = True
        return None
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    # The wrapper refuses to follow a symlink; refuse to write through one.
    flags |= getattr(os, "O_NOFOLLOW", 0)
    # Non-blocking open: a FIFO with no reader must not hang training (it
    # fails with ENXIO instead); anything but a regular file is refused.
    fd = os.open(path, flags | os.O_NONBLOCK, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        _disabled = True
        _warn("unsafe", "progress file %s is not a regular file; progress not reported" % path)
        return None
    os.set_blocking(fd, True)
    _fd = fd
    return _fd


def _write(fields):
    """Append one line; never raises."""
    global _disabled
    try:
        with _lock:
            fd = _open()
            if fd is None:
                return
            line = (" ".join([VERSION] + fields)).encode("ascii")
            if len(line) > MAX_LINE:
                _warn("long", "progress line longer than %d bytes dropped" % MAX_LINE)
                return
            data = line + b"\n"
            # One write per line: with O_APPEND a whole line lands at once,
            # and the reader sees it without a flush of our own buffers.
            while data:
                n = os.write(fd, data)
                data = data[n:]
    except Exception as e:  # noqa: BLE001 - must not break the training loop
        _disabled = True
        _warn("write", "progress reporting disabled: %s" % (e,))


def _uint(name, value):
    v = int(value)
    if v < 0:
        raise ValueError("%s must be >= 0, got %d" % (name, v))
    return v


def _float(value):
    f = float(value)
    if math.isnan(f):
        return "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return repr(f)


def _escape(path):
    return urllib.parse.quote(os.fsencode(path), safe="/")


def _now():
    return "%.6f" % time.time()


def step(step, epoch=None, loss=None, samples=None, total=None, epochs=None, steps_per_epoch=None):
    """Record that `step` optimizer steps are done (global, monotonic).

    epoch is the 0-based epoch in progress; loss may be a float or a 0-d tensor
    (float() is applied: pass loss.item() yourself to control when the GPU
    synchronises); total, epochs and steps_per_epoch describe the whole run.
    """
    global _last_step, _last_epoch
    if _disabled and _fd is None:
        return
    try:
        s = _uint("step", step)
        fields = ["step=%d" % s]
        if epoch is not None:
            e = _uint("epoch", epoch)
            fields.append("epoch=%d" % e)
            _last_epoch = e
        if samples is not None:
            fields.append("samples=%d" % _uint("samples", samples))
        if loss is not None:
            fields.append("loss=" + _float(loss))
        fields.append("t=" + _now())
        for name, v in (("total", total), ("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
            if v is not None:
                n = _uint(name, v)
                if n > 0:
                    fields.append("%s=%d" % (name, n))
        _last_step = s
    except Exception as e:  # noqa: BLE001
        _warn("step-args", "isched.step ignored bad arguments: %s" % (e,))
        return
    _write(fields)


def checkpoint(path, step=None):
    """Record a checkpoint the caller has finished writing at `path`.

    step defaults to the last step passed to step(). The path is recorded
    absolute.
    """
    if _disabled and _fd is None:
        return
    try:
        fields = ["ckpt", "path=" + _escape(os.path.abspath(os.fspath(path)))]
        s = _last_step if step is None else _uint("step", step)
        if s is not None:
            fields.append("step=%d" % s)
        if _last_epoch is not None:
            fields.append("epoch=%d" % _last_epoch)
        fields.append("t=" + _now())
    except Exception as e:  # noqa: BLE001
        _warn("ckpt-args", "isched.checkpoint ignored bad arguments: %s" % (e,))
        return
    _write(fields)


def resumed(step, path=None):
    """Record that training resumed at `step` (from checkpoint `path`)."""
    global _last_step
    if _disabled and _fd is None:
        return
    try:
        s = _uint("step", step)
        fields = ["resume", "step=%d" % s]
        if path is not None:
            fields.append("path=" + _escape(os.path.abspath(os.fspath(path))))
        fields.append("t=" + _now())
        _last_step = s
    except Exception as e:  # noqa: BLE001
        _warn("resume-args", "isched.resumed ignored bad arguments: %s" % (e,))
        return
    _write(fields)


def save(obj_saver, path, step=None, fsync=True):
    """Save a checkpoint atomically and record it; return `path`.

    obj_saver(tmp_path) writes the checkpoint, e.g.
    ``isched.save(lambda p: torch.save(state, p), "ckpt/last.pt")``. It writes to
    path + ".tmp", which is fsynced (unless fsync=False) and renamed over
    `path`, so readers never see a half-written file. An exception from
    obj_saver propagates (the temporary file is removed): a checkpoint that
    silently failed is worse than a crash.
    """
    path = os.fspath(path)
    tmp = path + ".tmp"
    try:
        obj_saver(tmp)
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if fsync:
        try:
            dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass
    checkpoint(path, step=step)
    return path


def _control_identity():
    path = os.environ.get("ISCHED_CONTROL_FILE")
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns)


def should_checkpoint():
    """True once per checkpoint request, then False until the next one.

    A request is a signal caught by install_signal_handlers(), or a new
    version of the wrapper's control file (ISCHED_CONTROL_FILE exists; the
    wrapper creates or touches it per request and removes it when done). The
    file is never deleted here, so every process of a job sees the request.
    """
    global _request_signal, _control_seen, _control_checked
    try:
        if _request_signal:
            _request_signal = False
            return True
        now = time.monotonic()
        if now - _control_checked < CONTROL_POLL_SECONDS:
            return False
        _control_checked = now
        ident = _control_identity()
        if ident is None or ident == _control_seen:
            return False
        _control_seen = ident
        return True
    except Exception as e:  # noqa: BLE001
        _warn("control", "isched.should_checkpoint failed: %s" % (e,))
        return False


def stop_requested():
    """True after SIGTERM or SIGINT was caught by install_signal_handlers():
    save (should_checkpoint() is also True) and leave the training loop."""
    return _stop_signal


def _handler(previous, stops):
    def handle(signum, frame):
        global _request_signal, _stop_signal
        _request_signal = True
        if stops:
            _stop_signal = True
        if callable(previous):
            previous(signum, frame)

    return handle


def install_signal_handlers(signals=None):
    """Turn SIGUSR1 and SIGTERM (or `signals`) into checkpoint requests.

    SIGTERM then no longer kills the process: check stop_requested() and
    exit after saving. Python-level handlers installed before are still
    called. Returns False (with a warning) when handlers cannot be installed,
    e.g. outside the main thread.
    """
    if signals is None:
        signals = (signal.SIGUSR1, signal.SIGTERM)
    try:
        for sig in signals:
            previous = signal.getsignal(sig)
            signal.signal(sig, _handler(previous, sig in (signal.SIGTERM, signal.SIGINT)))
        return True
    except Exception as e:  # noqa: BLE001
        _warn("signals", "isched.install_signal_handlers failed: %s" % (e,))
        return False


def resume_path():
    """ISCHED_RESUME_FROM if it names an existing regular file, else None."""
    path = os.environ.get("ISCHED_RESUME_FROM")
    if not path:
        return None
    try:
        if stat.S_ISREG(os.stat(path).st_mode):
            return path
    except (OSError, ValueError):
        pass
    return None


def device():
    """ISCHED_DEVICE, else "cuda" if CUDA is usable, else "cpu".

    torch is imported only if no cheaper answer exists: it is already
    imported, CUDA_VISIBLE_DEVICES hides every GPU, or the machine has no
    NVIDIA driver.
    """
    d = os.environ.get("ISCHED_DEVICE")
    if d:
        return d
    torch = sys.modules.get("torch")
    if torch is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
            return "cpu"
        if not (os.path.exists("/proc/driver/nvidia") or os.path.exists("/dev/nvidia0")):
            return "cpu"
        try:
            import torch  # noqa: PLC0415 - only when needed
        except Exception:  # noqa: BLE001
            return "cpu"
    try:
        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:  # noqa: BLE001
        return "cpu"


def world():
    """This process's place in a distributed run, as (rank, size, local_rank).

    torch.distributed's group when it is initialised; else the environment
    torchrun gives its workers and isched-wrapper gives each task of a Slurm
    step of several (RANK, WORLD_SIZE, LOCAL_RANK); else (0, 1, 0). A run
    resumed at another world size reads its new size here.
    """
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0") or 0)
    except Exception:  # noqa: BLE001 - a half-set-up group: the environment says
        pass

    def num(name, default):
        v = os.environ.get(name, "")
        try:
            return int(v) if v.strip() else default
        except ValueError:
            raise ValueError("%s=%r: want a whole number" % (name, v)) from None

    rank, size, local = num("RANK", 0), num("WORLD_SIZE", 1), num("LOCAL_RANK", 0)
    if size < 1 or not 0 <= rank < size:
        raise ValueError("RANK=%d, WORLD_SIZE=%d: want 0 <= RANK < WORLD_SIZE" % (rank, size))
    return rank, size, local


def accumulation(global_batch, batch_per_rank, world_size=None):
    """Gradient-accumulation steps that keep global_batch samples per optimizer step.

    global_batch = batch_per_rank x world_size x the steps returned, so the
    optimizer sees the same batch (and the learning rate stays right) when
    a run resumes at another world size. world_size defaults to world()'s.
    ValueError when it does not divide: say which batch to use instead.
    """
    if world_size is None:
        world_size = world()[1]
    for name, v in (("global_batch", global_batch), ("batch_per_rank", batch_per_rank), ("world_size", world_size)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError("%s=%r: want a positive whole number" % (name, v))
    per_step = batch_per_rank * world_size
    if global_batch % per_step:
        raise ValueError("global batch %d is not a multiple of %d (batch %d per rank x %d ranks): "
                         "use a batch per rank that divides %d, or a global batch of %d or %d"
                         % (global_batch, per_step, batch_per_rank, world_size, global_batch // world_size,
                            (global_batch // per_step) * per_step or per_step, (global_batch // per_step + 1) * per_step))
    return global_batch // per_step


def global_batches(num_samples, global_batch, samples=0, seed=0):
    """Yield the global batches (lists of sample indices) from `samples` on.

    The sample stream is one permutation of range(num_samples) per epoch
    (random.Random(seed + epoch), the same on every rank), concatenated; a
    global batch is the next global_batch indices of it and may cross an
    epoch's end. It depends on the samples seen, not on the world size or
    the step count: a run resumed at another world size, or with another
    global batch, continues where it stopped. Endless: stop it yourself.
    """
    import random  # noqa: PLC0415 - only for scripts that shard with isched

    for name, v in (("num_samples", num_samples), ("global_batch", global_batch)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError("%s=%r: want a positive whole number" % (name, v))
    pos = _uint("samples", samples)
    epoch, order = None, None
    while True:
        batch = []
        while len(batch) < global_batch:
            if epoch != pos // num_samples:
                epoch = pos // num_samples
                order = list(range(num_samples))
                random.Random(seed + epoch).shuffle(order)
            take = min(global_batch - len(batch), num_samples - pos % num_samples)
            batch.extend(order[pos % num_samples:pos % num_samples + take])
            pos += take
        yield batch


def rank_batches(batch, batch_per_rank, rank=None, world_size=None):
    """This rank's micro-batches of one global batch (from global_batches).

    Micro-batch j of rank r is batch[(j * world_size + r) * batch_per_rank:
    ...+ batch_per_rank]: every rank gets accumulation(len(batch),
    batch_per_rank) of them, and together the ranks cover the global batch
    once, at any world size. rank and world_size default to world()'s.
    """
    if rank is None or world_size is None:
        r, w, _ = world()
        rank = r if rank is None else rank
        world_size = w if world_size is None else world_size
    steps = accumulation(len(batch), batch_per_rank, world_size)
    return [list(batch[(j * world_size + rank) * batch_per_rank:(j * world_size + rank + 1) * batch_per_rank])
            for j in range(steps)]

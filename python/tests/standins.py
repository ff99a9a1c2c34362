"""Small stand-ins for the two trainers, calling callbacks in the order the
real ones do. They follow the sources, not a guess:

Lightning 2.x (lightning.pytorch; src/lightning/pytorch/trainer/trainer.py
Trainer._run, loops/fit_loop.py, loops/training_epoch_loop.py,
trainer/connectors/signal_connector.py; the hook order table of
docs "LightningModule -> Hooks"):
  fit: setup("fit") -> on_fit_start -> restore the checkpoint (ckpt_path)
  -> SignalConnector.register_signal_handlers() -> on_train_start ->
  per epoch on_train_epoch_start, per batch on_train_batch_start,
  training_step/backward/optimizer_step (global_step counts optimizer steps:
  once per accumulate_grad_batches batches), on_train_batch_end, then
  batch_progress.increment_completed(), then
  _TrainingEpochLoop.on_advance_end raises SIGTERMException when
  trainer.received_sigterm; on_train_epoch_end; on_train_end; teardown of
  the signal handlers (the originals restored); on_fit_end; teardown.
  A checkpoint records global_step and the epoch loop's batch_progress;
  one saved in on_train_batch_end (ModelCheckpoint(every_n_train_steps),
  isched's) records the batch as not completed yet, so a fit resumed from
  it runs that batch again: one optimizer step more than the run had left
  (Lightning issues #18060, #19815; measured with Lightning 2.2.5, the
  version python/requirements-ci.txt pins: saved at global_step 3 of 8
  batches, the resumed fit starts at batch_idx 2 and ends at step 17 of
  16).
  register_signal_handlers: with SLURMEnvironment(auto_requeue=True) it
  installs its requeue handler on requeue_signal (SIGUSR1) only if that
  signal has no handler yet (_has_already_handler), and always a SIGTERM
  handler that sets received_sigterm and calls the previous one.

transformers 4.4x (checked against 4.40.2: src/transformers/trainer.py
Trainer._inner_training_loop and _maybe_log_save_evaluate;
trainer_callback.py CallbackHandler, DefaultFlowCallback):
  trainer_state.json of resume_from_checkpoint loaded (global_step) ->
  on_train_begin (the handler first sets should_training_stop False) -> per
  epoch on_epoch_begin (the handler first sets should_epoch_stop False), per
  step on_step_begin (the handler first sets should_log, should_evaluate
  and should_save False), the step, global_step += 1, state.epoch = epoch +
  (step + 1) / steps_in_epoch, on_step_end (DefaultFlowCallback first: save
  every save_steps, and at max_steps should_training_stop),
  _maybe_log_save_evaluate: if should_save, _save_checkpoint writes
  <output_dir>/checkpoint-<global_step> and on_save is called (the handler
  resets should_save first); should_epoch_stop or should_training_stop
  breaks; on_epoch_end (should_epoch_stop still as the epoch left it) +
  _maybe_log_save_evaluate; on_train_end. A callback's returned control
  replaces the handler's.
"""

import json
import math
import os
import signal


# ---------------------------------------------------------------- Lightning


class SLURMEnvironment:
    def __init__(self, auto_requeue=True, requeue_signal=signal.SIGUSR1):
        self.auto_requeue = auto_requeue
        self.requeue_signal = requeue_signal


class LightningEnvironment:
    pass


class SIGTERMException(SystemExit):
    pass


class Strategy:
    def __init__(self, env):
        self.cluster_environment = env
        self.broadcasts = 0
        self.rank0_decision = None  # set: this process is a rank > 0 and rank 0 decided this

    def broadcast(self, obj, src=0):
        self.broadcasts += 1
        return obj if self.rank0_decision is None else self.rank0_decision


class ModelCheckpoint:
    """Lightning's ModelCheckpoint(save_last=True, every_n_train_steps=n):
    writes last.ckpt at on_train_batch_end (checkpoint callbacks run last)."""

    def __init__(self, dirpath, every_n_train_steps):
        self.dirpath = dirpath
        self.every = every_n_train_steps
        self.last_model_path = ""
        self.best_model_path = ""
        self.best_k_models = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step and trainer.global_step % self.every == 0:
            p = os.path.join(self.dirpath, "last.ckpt")
            trainer.save_checkpoint(p)
            self.last_model_path = p


class LightningTrainer:
    def __init__(self, callbacks, max_epochs=2, batches=6, accumulate_grad_batches=1, env=None,
                 default_root_dir=".", world_size=1, is_global_zero=True, on_batch=None):
        self.callbacks = list(callbacks)
        self.max_epochs = max_epochs
        self.max_steps = -1
        self.num_training_batches = batches
        self.accumulate_grad_batches = accumulate_grad_batches
        self.default_root_dir = default_root_dir
        self.strategy = Strategy(env if env is not None else LightningEnvironment())
        self.world_size = world_size
        self.is_global_zero = is_global_zero
        self.global_step = 0
        self.current_epoch = 0
        self.received_sigterm = False
        self.ckpt_path = None
        self.should_stop = False
        self.batches_completed = 0  # batch_progress.current.completed in this epoch
        self.events = []  # what the trainer did: saves, requeues
        self.on_batch = on_batch  # test hook: called before each batch's hooks
        self._original = {}

    @property
    def estimated_stepping_batches(self):
        return self.max_epochs * math.ceil(self.num_training_batches / self.accumulate_grad_batches)

    @property
    def checkpoint_callbacks(self):
        return [c for c in self.callbacks if isinstance(c, ModelCheckpoint)]

    def _call(self, hook, *args):
        # Lightning moves checkpoint callbacks to the end of the list
        for cb in [c for c in self.callbacks if not isinstance(c, ModelCheckpoint)] + self.checkpoint_callbacks:
            fn = getattr(cb, hook, None)
            if fn is not None:
                fn(self, None, *args)

    def save_checkpoint(self, path):
        self.events.append(("save", path, self.global_step))
        with open(path, "w") as f:
            json.dump({"global_step": self.global_step, "epoch": self.current_epoch,
                       "batches_completed": self.batches_completed}, f)

    # SignalConnector
    def _register_signal_handlers(self):
        self._original = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
        env = self.strategy.cluster_environment
        if isinstance(env, SLURMEnvironment) and env.auto_requeue:
            sig = env.requeue_signal
            if signal.getsignal(sig) in (None, signal.SIG_DFL):  # _has_already_handler
                def requeue(signum, frame):
                    self.events.append(("hpc-save+requeue", signum))
                signal.signal(sig, requeue)
        previous = signal.getsignal(signal.SIGTERM)

        def sigterm(signum, frame):
            self.received_sigterm = True
            if callable(previous):
                previous(signum, frame)
        signal.signal(signal.SIGTERM, sigterm)

    def _teardown_signal_handlers(self):
        for s, h in self._original.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)

    def fit(self, model=None, ckpt_path=None):
        self._call("setup", "fit")
        self._call("on_fit_start")
        start_batch = 0
        if ckpt_path:
            with open(ckpt_path) as f:
                st = json.load(f)
            self.global_step = st["global_step"]
            self.ckpt_path = ckpt_path
            # the loops restart at the saved batch_progress: a checkpoint
            # saved in on_train_batch_end of batch i has i completed, so
            # batch i runs again
            self.current_epoch = st["epoch"]
            start_batch = st["batches_completed"]
            if start_batch >= self.num_training_batches:
                self.current_epoch, start_batch = self.current_epoch + 1, 0
        self._register_signal_handlers()
        try:
            self._call("on_train_start")
            for epoch in range(self.current_epoch, self.max_epochs):
                self.current_epoch = epoch
                self._call("on_train_epoch_start")
                self.batches_completed = start_batch
                for i in range(start_batch, self.num_training_batches):
                    if self.on_batch:
                        self.on_batch(self, i)
                    self._call("on_train_batch_start", None, i)
                    if (i + 1) % self.accumulate_grad_batches == 0 or i + 1 == self.num_training_batches:
                        self.global_step += 1  # optimizer_step
                    self._call("on_train_batch_end", {"loss": 0.5}, None, i)
                    self.batches_completed = i + 1  # after the hooks
                    if self.received_sigterm:
                        raise SIGTERMException(1)
                start_batch = 0
                self._call("on_train_epoch_end")
            self._call("on_train_end")
        finally:
            self._teardown_signal_handlers()
        self._call("on_fit_end")
        self._call("teardown", "fit")


# ---------------------------------------------------------- transformers


class TrainingArguments:
    def __init__(self, output_dir, num_train_epochs=2, save_steps=0):
        self.output_dir = output_dir
        self.num_train_epochs = num_train_epochs
        self.save_steps = save_steps


class TrainerState:
    def __init__(self):
        self.global_step = 0
        self.max_steps = 0
        self.num_train_epochs = 0
        self.epoch = None
        self.is_world_process_zero = True


class TrainerControl:
    def __init__(self):
        self.should_training_stop = False
        self.should_epoch_stop = False
        self.should_save = False
        self.should_evaluate = False
        self.should_log = False


class DefaultFlowCallback:
    def on_step_end(self, args, state, control, **kw):
        if args.save_steps > 0 and state.global_step % args.save_steps == 0:
            control.should_save = True
        if state.global_step >= state.max_steps:
            control.should_training_stop = True
            if args.save_steps > 0:  # save_strategy != "no": a last save
                control.should_save = True
        return control


class HFTrainer:
    def __init__(self, args, callbacks, steps_in_epoch=5, on_step=None):
        self.args = args
        self.callbacks = [DefaultFlowCallback()] + list(callbacks)
        self.steps_in_epoch = steps_in_epoch
        self.state = TrainerState()
        self.control = TrainerControl()
        self.saved = []
        self.on_step = on_step

    def _event(self, name):
        control = self.control
        # CallbackHandler resets these before calling the callbacks (4.40.2
        # trainer_callback.py; later releases call TrainerControl._new_epoch
        # and friends there). should_epoch_stop is reset when the next epoch
        # begins, so on_epoch_end still sees the flag that ended the epoch.
        if name == "on_save":
            control.should_save = False
        elif name == "on_epoch_begin":
            control.should_epoch_stop = False
        elif name == "on_step_begin":
            control.should_log = control.should_evaluate = control.should_save = False
        elif name == "on_train_begin":
            control.should_training_stop = False
        for cb in self.callbacks:
            fn = getattr(cb, name, None)
            if fn is None:
                continue
            out = fn(self.args, self.state, control, model=None)
            if out is not None:
                control = out
        self.control = control

    def _save_checkpoint(self):
        d = os.path.join(self.args.output_dir, "checkpoint-%d" % self.state.global_step)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "trainer_state.json"), "w") as f:
            json.dump({"global_step": self.state.global_step}, f)
        self.saved.append(d)

    def _maybe_log_save_evaluate(self):
        if self.control.should_save:
            self._save_checkpoint()
            self._event("on_save")

    def train(self, resume_from_checkpoint=None):
        self.state.max_steps = self.args.num_train_epochs * self.steps_in_epoch
        self.state.num_train_epochs = self.args.num_train_epochs
        if resume_from_checkpoint is not None:
            with open(os.path.join(resume_from_checkpoint, "trainer_state.json")) as f:
                self.state.global_step = json.load(f)["global_step"]
        skip = self.state.global_step
        self._event("on_train_begin")
        for epoch in range(skip // self.steps_in_epoch, self.args.num_train_epochs):
            self._event("on_epoch_begin")
            for step in range(self.steps_in_epoch):
                if epoch * self.steps_in_epoch + step < skip:
                    continue
                if self.on_step:
                    self.on_step(self, step)
                self._event("on_step_begin")
                self.state.global_step += 1
                self.state.epoch = epoch + (step + 1) / self.steps_in_epoch
                self._event("on_step_end")
                self._maybe_log_save_evaluate()
                if self.control.should_epoch_stop or self.control.should_training_stop:
                    break
            self._event("on_epoch_end")
            self._maybe_log_save_evaluate()
            if self.control.should_training_stop:
                break
        self._event("on_train_end")

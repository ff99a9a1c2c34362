"""Resuming at another world size (issue 42): the plain PyTorch loop of
elastic_worker.py, checkpointed at one world size and resumed at another,
ends where an uninterrupted run ends, with the same global batch at every
optimizer step; and isched.global_batches / rank_batches on their own.

Two ranks are two processes joined over gloo from the environment
isched-wrapper gives the tasks of a Slurm step (as test_world.py).
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import isched  # noqa: E402
from test_world import free_port  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_LIGHTNING = HAVE_TORCH and importlib.util.find_spec("lightning") is not None
HAVE_HF = HAVE_TORCH and all(importlib.util.find_spec(m) is not None for m in ("transformers", "accelerate"))
GLOBAL_BATCH, PER_RANK, STOP, TOTAL = 8, 2, 3, 7


class Sharding(unittest.TestCase):
    def test_order_depends_on_samples_not_batch(self):
        small = isched.global_batches(10, 4, seed=3)
        stream = [i for _ in range(6) for i in next(small)]  # 24 samples: 2.4 epochs
        self.assertEqual(sorted(stream[:10]), list(range(10)), "each epoch is a permutation")
        self.assertEqual(sorted(stream[10:20]), list(range(10)))
        self.assertNotEqual(stream[:10], stream[10:20], "a new order per epoch")
        self.assertEqual(next(isched.global_batches(10, 8, samples=12, seed=3)), stream[12:20],
                         "resumed with another global batch: the same stream from the samples seen")

    def test_ranks_cover_the_global_batch_once(self):
        batch = list(range(100, 116))
        for size in (1, 2, 4):
            parts = [isched.rank_batches(batch, 2, rank=r, world_size=size) for r in range(size)]
            self.assertEqual({len(p) for p in parts}, {isched.accumulation(16, 2, size)})
            self.assertEqual(sorted(i for p in parts for m in p for i in m), batch)
        with self.assertRaisesRegex(ValueError, "not a multiple"):
            isched.rank_batches(list(range(10)), 4, rank=0, world_size=2)


ATTEMPTS = 3  # worlds started, each on a fresh port


class Ranks:
    def start(self, size, args, extra=None):
        """`args` as `size` ranks, with the wrapper's environment; wait.

        free_port's port is free when it answers, not when rank 0 binds it:
        on a busy machine (CI runs the Go tests beside these) another
        process can take it in between, and a rank then fails to bind or
        waits forever on a stranger's socket. Such a world is killed and
        started again on a fresh port, at most ATTEMPTS times; a rank that
        fails for any other reason fails the test at once."""
        why = ""
        for _ in range(ATTEMPTS):
            done, why = Ranks._world(self, size, args, extra)
            if done:
                return
        raise AssertionError("%d worlds of %d ranks did not start, each on a fresh port; the last: %s" % (ATTEMPTS, size, why))

    def _world(self, size, args, extra):
        """One world; (True, "") when every rank exited 0, (False, why)
        when it hung or lost its port. The world's progress file starts
        empty: an attempt killed before writes none of its lines into the
        next."""
        progress = (extra or {}).get("ISCHED_PROGRESS_FILE")
        if progress and os.path.exists(progress):
            os.remove(progress)
        port, procs = str(free_port()), []
        for rank in range(size):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("ISCHED_", "SLURM_"))}
            env.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(size),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **(extra or {}))
            procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        try:
            for p in procs:
                _, err = p.communicate(timeout=120)
                if p.returncode != 0 and "Address already in use" in err:
                    return False, "port %s taken: %s" % (port, err[-500:])
                if p.returncode != 0:
                    raise AssertionError("rank exited %d:\n%s" % (p.returncode, err[-3000:]))
        except subprocess.TimeoutExpired:
            return False, "ranks on port %s still running after 120 s" % port
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.communicate()
        return True, ""


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class PlainDDPResume(unittest.TestCase, Ranks):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.reference = cls.run_world(cls, 1, TOTAL, "reference")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_world(self, size, stop_at, name, resume=None):
        """elastic_worker.py at `size` ranks up to step stop_at; rank 0's
        record, with the progress lines it wrote."""
        d = os.path.join(self.tmp.name, name)
        os.makedirs(d)
        out, ckpt, progress = (os.path.join(d, n) for n in ("out.json", "ckpt.pt", "progress"))
        extra = {"ISCHED_PROGRESS_FILE": progress}
        if resume:
            extra["ISCHED_RESUME_FROM"] = resume
        Ranks.start(self, size, [sys.executable, os.path.join(HERE, "elastic_worker.py"), out, ckpt, str(stop_at),
                                 str(GLOBAL_BATCH), str(PER_RANK)], extra)
        with open(out) as f:
            rec = json.load(f)
        with open(progress) as f:
            rec["lines"] = f.read().splitlines()
        rec["ckpt"] = ckpt
        return rec

    def resume(self, first, second, name):
        a = self.run_world(first, STOP, name + "-a")
        b = self.run_world(second, TOTAL, name + "-b", resume=a["ckpt"])
        return a, b

    def check(self, a, b, first, second):
        ref = self.reference
        self.assertEqual((a["world_size"], b["world_size"]), (first, second))
        self.assertFalse([k for k in a["keys"] if k.startswith("module.")], "saved unwrapped")
        log = a["log"] + b["log"]
        self.assertEqual([e["step"] for e in log], list(range(1, TOTAL + 1)), "the step counter continues")
        for e in log:
            self.assertEqual(e["global_batch"], GLOBAL_BATCH, e)
        for e, size in ((a["log"][0], first), (b["log"][0], second)):
            self.assertEqual(e["accumulation"] * PER_RANK * size, GLOBAL_BATCH)
        self.assertEqual([e["samples"] for e in log], [GLOBAL_BATCH * s for s in range(1, TOTAL + 1)])
        for got, want in zip(log, ref["log"]):
            self.assertAlmostEqual(got["loss"], want["loss"], places=9, msg="step %d" % got["step"])
        self.assertLess(b["log"][0]["loss"], ref["log"][0]["loss"], "no jump back to the start")
        for got, want in zip(b["weights"], ref["weights"]):
            self.assertAlmostEqual(got, want, places=9)
        self.assertEqual(b["lines"][0].split()[:3], ["isched1", "resume", "step=%d" % STOP])
        self.assertTrue(re.match(r"isched1 step=%d samples=%d " % (STOP + 1, (STOP + 1) * GLOBAL_BATCH), b["lines"][1]),
                        b["lines"][1])

    def test_two_ranks_to_one(self):
        a, b = self.resume(2, 1, "2to1")
        self.check(a, b, 2, 1)

    def test_one_rank_to_two(self):
        a, b = self.resume(1, 2, "1to2")
        self.check(a, b, 1, 2)


def samples_by_step(lines):
    return {int(m.group(1)): int(m.group(2)) for m in (re.match(r"isched1 step=(\d+) .*samples=(\d+)", ln) for ln in lines) if m}


class FrameworkRanks(Ranks):
    WORKER = None

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def attempt(self, size, name, length, at, global_batch, resume=None):
        extra = {"ISCHED_RESUME_FROM": resume} if resume else {}
        Ranks.start(self, size, [sys.executable, os.path.join(HERE, self.WORKER), self.tmp.name, name,
                                 str(length), str(at), str(global_batch), "2"], extra)
        recs = []
        for rank in range(size):
            with open(os.path.join(self.tmp.name, "%s-rank%d.json" % (name, rank))) as f:
                recs.append(json.load(f))
        with open(os.path.join(self.tmp.name, name + "-progress")) as f:
            lines = f.read().splitlines()
        return recs, lines

    def per_step(self, recs):
        """{optimizer step: samples all ranks put into it}"""
        out = {}
        for rec in recs:
            for step, n, *_ in rec["steps"]:
                out[step] = out.get(step, 0) + n
        return out

    def checkpoint_of(self, lines, at):
        (ck,) = [ln for ln in lines if ln.startswith("isched1 ckpt ")]
        self.assertIn(" step=%d " % at, ck)
        return urllib.parse.unquote(re.search(r" path=(\S+)", ck).group(1))


@unittest.skipUnless(HAVE_HF, "transformers (with accelerate) is not installed")
class HFResume(unittest.TestCase, FrameworkRanks):
    """elastic_hf_worker.py: the real Trainer (use_cpu, ddp_backend gloo) at
    2 and 1 ranks, gradient_accumulation_steps from isched.accumulation,
    32 samples, 2 per rank per batch, max_steps 8; the first attempt stops
    at the checkpoint it was asked for at step 3."""

    WORKER = "elastic_hf_worker.py"
    setUp = FrameworkRanks.setUp

    def resume(self, first, second, batches):
        _, lines_a = self.attempt(first, "a", 16, 3, batches[0])
        recs, lines = self.attempt(second, "b", 8, 0, batches[1], resume=self.checkpoint_of(lines_a, 3))
        self.assertEqual([r["world_size"] for r in recs], [second] * second)
        self.assertEqual(lines[0].split()[:3], ["isched1", "resume", "step=3"])
        self.assertEqual(recs[0]["global_step"], 8)
        return recs, lines

    def test_two_ranks_to_one_keeps_the_global_batch(self):
        recs, lines = self.resume(2, 1, (8, 8))
        self.assertEqual(self.per_step(recs), {s: 8 for s in range(4, 9)})
        self.assertEqual(samples_by_step(lines), {s: 8 * s for s in range(4, 9)})

    def test_one_rank_to_two_with_linear_scaling_counts_samples(self):
        recs, lines = self.resume(1, 2, (4, 8))
        self.assertEqual(self.per_step(recs), {s: 8 for s in range(4, 9)})
        self.assertEqual(samples_by_step(lines), {s: 12 + 8 * (s - 3) for s in range(4, 9)})


@unittest.skipUnless(HAVE_LIGHTNING, "Lightning is not installed")
class LightningResume(unittest.TestCase, FrameworkRanks):
    """elastic_lightning_worker.py: the real Trainer at devices=2 (ddp,
    gloo, CPU; two processes started as the wrapper starts them) and at
    devices=1, from isched.lightning.trainer_kwargs; 32 samples, 2 per rank
    per batch, a checkpoint asked for mid-epoch, resumed with max_epochs=2."""

    WORKER = "elastic_lightning_worker.py"
    setUp = FrameworkRanks.setUp

    def resume(self, first, second, batches, at):
        _, lines_a = self.attempt(first, "a", 1, at, batches[0])
        recs_b, lines_b = self.attempt(second, "b", 2, 0, batches[1], resume=self.checkpoint_of(lines_a, at))
        self.assertEqual([r["world_size"] for r in recs_b], [second] * second)
        self.assertEqual(lines_b[0].split()[:3], ["isched1", "resume", "step=%d" % at])
        return recs_b, lines_b

    def test_two_devices_to_one_keeps_the_global_batch(self):
        recs, lines = self.resume(2, 1, (8, 8), at=2)
        self.assertEqual(recs[0]["kwargs"], {"devices": 1, "num_nodes": 1, "accumulate_grad_batches": 4})
        self.assertEqual(self.per_step(recs), {s: 8 for s in range(3, 9)},
                         "steps 3..8 (2 epochs of 4), 8 samples each: no short step at the resume")
        self.assertEqual(recs[0]["global_step"], 8)
        self.assertEqual(samples_by_step(lines), {s: 8 * s for s in range(3, 9)})

    def test_same_world_keeps_the_global_batch(self):
        """Resumed at the size it was saved at (a requeue or a move at the
        same size): IschedCallback saves in on_train_batch_end, before
        Lightning counts the batch completed, and Lightning resumes from
        the completed count: without the restatement the first step after
        the resume had 1 micro-batch of its 4 (2 samples, not 8)."""
        recs, lines = self.resume(1, 1, (8, 8), at=2)
        self.assertEqual(self.per_step(recs), {s: 8 for s in range(3, 9)})
        self.assertEqual(recs[0]["global_step"], 8)
        self.assertEqual(samples_by_step(lines), {s: 8 * s for s in range(3, 9)})

    def test_at_an_epoch_end(self):
        """The checkpoint asked for at the last step of epoch 0 (step 4 of
        4), saved at the epoch's last batch: the resumed attempt starts
        epoch 1 with a whole step, at another size or the same (it ran a
        step of one micro-batch, 2 samples, then one step too many)."""
        for first, second in ((2, 1), (1, 1)):
            with self.subTest(first=first, second=second):
                _, lines_a = self.attempt(first, "a%d%d" % (first, second), 2, 4, 8)
                recs, lines = self.attempt(second, "b%d%d" % (first, second), 2, 0, 8, resume=self.checkpoint_of(lines_a, 4))
                self.assertEqual(self.per_step(recs), {s: 8 for s in range(5, 9)})
                self.assertEqual(samples_by_step(lines), {s: 8 * s for s in range(5, 9)})

    def test_one_device_to_two_with_linear_scaling_counts_samples(self):
        """Global batch 4 on one device, 8 on two (the rule scales it):
        samples go on from the 12 of step 3, 8 a step; epoch 0's 12 samples
        done are 2 steps of 8 (rounded up), so 2 steps are left of it, then
        the 4 of epoch 1."""
        recs, lines = self.resume(1, 2, (4, 8), at=3)
        self.assertEqual(recs[1]["kwargs"], {"devices": 2, "num_nodes": 1, "accumulate_grad_batches": 2})
        steps = self.per_step(recs)
        self.assertEqual(steps, {s: 8 for s in range(4, 10)})
        self.assertEqual(samples_by_step(lines), {s: 12 + 8 * (s - 3) for s in steps})


if __name__ == "__main__":
    unittest.main()

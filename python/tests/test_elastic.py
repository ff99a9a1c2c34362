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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import isched  # noqa: E402
from test_world import free_port  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None
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


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class PlainDDPResume(unittest.TestCase):
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
        port, procs = str(free_port()), []
        for rank in range(size):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("ISCHED_", "SLURM_"))}
            env.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(size),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port, ISCHED_PROGRESS_FILE=progress)
            if resume:
                env["ISCHED_RESUME_FROM"] = resume
            args = [sys.executable, os.path.join(HERE, "elastic_worker.py"), out, ckpt, str(stop_at),
                    str(GLOBAL_BATCH), str(PER_RANK)]
            procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for p in procs:
            _, err = p.communicate(timeout=120)
            if p.returncode != 0:
                raise AssertionError("rank exited %d:\n%s" % (p.returncode, err))
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


if __name__ == "__main__":
    unittest.main()

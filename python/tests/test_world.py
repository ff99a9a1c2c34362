"""isched.world() and isched.accumulation(): a run's place in a distributed
run, and the accumulation that keeps its global batch at any world size.

The gloo test starts two processes with the environment isched-wrapper
gives the two tasks of a Slurm step (internal/wrapper/distenv.go: RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and checks that
init_process_group's default env:// joins them, as under torchrun.
"""

import importlib.util
import os
import socket
import subprocess
import sys
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE)))

import isched  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None


class World(unittest.TestCase):
    def test_alone(self):
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertEqual(isched.world(), (0, 1, 0))

    def test_from_the_environment(self):
        with mock.patch.dict(os.environ, {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, clear=True):
            self.assertEqual(isched.world(), (3, 4, 1))

    def test_bad_environment_names_the_variable(self):
        for env, want in (({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x'"), ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2, WORLD_SIZE=2")):
            with mock.patch.dict(os.environ, env, clear=True):
                with self.assertRaisesRegex(ValueError, want):
                    isched.world()


class Accumulation(unittest.TestCase):
    def test_keeps_the_global_batch(self):
        for size, want in ((1, 8), (2, 4), (4, 2), (8, 1)):
            self.assertEqual(isched.accumulation(256, 32, size), want)
            self.assertEqual(want * 32 * size, 256)

    def test_world_size_from_the_environment(self):
        with mock.patch.dict(os.environ, {"RANK": "0", "WORLD_SIZE": "2"}, clear=True):
            self.assertEqual(isched.accumulation(128, 16), 4)

    def test_says_what_would_divide(self):
        with self.assertRaisesRegex(ValueError, r"global batch 100 is not a multiple of 64 .*batch per rank that divides 50, or a global batch of 64 or 128"):
            isched.accumulation(100, 32, 2)
        for bad in ((0, 8, 1), (8, 0, 1), (8, 8, 0), (8.0, 8, 1), (True, 8, 1)):
            with self.assertRaisesRegex(ValueError, "want a positive whole number"):
                isched.accumulation(*bad)


WORKER = """
import os, sys
sys.path.insert(0, %r)
import torch, torch.distributed as dist
import isched
dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(isched.world(), int(t.item()), isched.accumulation(64, 8), flush=True)
dist.destroy_process_group()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class GlooFromTheWrappersEnvironment(unittest.TestCase):
    def test_two_ranks_join(self):
        port = str(free_port())
        procs = []
        for rank in (0, 1):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            procs.append(subprocess.Popen([sys.executable, "-c", WORKER % os.path.dirname(HERE)], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=120) for p in procs]
        for rank, (p, (out, err)) in enumerate(zip(procs, outs)):
            self.assertEqual(p.returncode, 0, err)
            self.assertEqual(out.strip(), "(%d, 2, %d) 3 4" % (rank, rank))


if __name__ == "__main__":
    unittest.main()

"""The save decision across ranks over a real torch.distributed group.

Two processes (dist_worker.py) join a gloo group on this machine and run the
isched callbacks with different local requests: rank 0 is asked before step
2, rank 1 before step 3. Both must save at step 2 only: rank 0's decision,
reached through the real collective (isched.hf._torch_agree; Lightning's
DDPStrategy.broadcast), where the stand-in tests inject it.
"""

import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dist_worker.py")
TIMEOUT = 120  # seconds for both ranks together; they take about 5 s


def _torch_distributed():
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available()


HAVE_DIST = _torch_distributed()
HAVE_LIGHTNING = importlib.util.find_spec("lightning") is not None

# [global_step, this rank's own request, the decision both took]: one per
# optimizer step, in both ranks' order
EXPECTED = {
    0: [[1, False, False], [2, True, True], [3, False, False], [4, False, False]],
    1: [[1, False, False], [2, False, True], [3, True, False], [4, False, False]],
}


@unittest.skipUnless(HAVE_DIST, "torch.distributed not available here")
class TwoRanks(unittest.TestCase):
    def run_ranks(self, mode):
        import json

        with tempfile.TemporaryDirectory() as d:
            init = os.path.join(d, "init")  # file:// rendezvous: no port to pick
            env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
            for k in ("ISCHED_RESUME_FROM", "ISCHED_ALL_RANKS", "SLURM_PROCID", "LOCAL_RANK", "WORLD_SIZE",
                      "MASTER_ADDR", "MASTER_PORT"):
                env.pop(k, None)
            procs = []
            for rank, at in ((0, 1), (1, 2)):  # asked before step at + 1
                procs.append(subprocess.Popen([sys.executable, WORKER, mode, str(rank), "2", init, d, str(at)],
                                              cwd=d, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                              universal_newlines=True))
            outs = []
            try:
                for p in procs:
                    outs.append(p.communicate(timeout=TIMEOUT)[0])
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
            for rank, p in enumerate(procs):
                self.assertEqual(p.returncode, 0, "rank %d failed:\n%s" % (rank, outs[rank][-3000:]))
            res = {}
            for rank in (0, 1):
                with open(os.path.join(d, "rank%d.json" % rank)) as f:
                    res[rank] = json.load(f)
            with open(os.path.join(d, "progress0")) as f:
                progress0 = f.read().splitlines()
            p1 = os.path.join(d, "progress1")
            progress1 = ""
            if os.path.exists(p1):
                with open(p1) as f:
                    progress1 = f.read()
        for rank in (0, 1):
            self.assertEqual(res[rank]["decisions"], EXPECTED[rank], "rank %d" % rank)
            self.assertEqual(res[rank]["saves"], [2], "rank %d saved with rank 0, at step 2 only" % rank)
        cks = [ln for ln in progress0 if ln.startswith("isched1 ckpt ")]
        self.assertEqual(len(cks), 1, progress0)
        self.assertIn(" step=2 ", cks[0] + " ")
        self.assertFalse(progress1, "rank 1 writes no progress")

    def test_hf_ranks_take_rank_zeros_decision(self):
        self.run_ranks("hf")

    @unittest.skipUnless(HAVE_LIGHTNING, "Lightning not installed here")
    def test_lightning_ranks_take_rank_zeros_decision(self):
        self.run_ranks("lightning")


if __name__ == "__main__":
    unittest.main()

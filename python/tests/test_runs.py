"""Tests of isched.runs: the Job object (state, progress, wait, result,
cancel, output), isched.jobs() and the Executor that runs a Python function
in a job, with its runner (isched/_call.py) run here as the job would.

The isched command is a fake (FAKE below) that answers each call with the
next of a scripted list and records every argv, so waiting, the Slurm and
coordinator sources and the flags are checked without Slurm; the lab test
of the same flow is examples/functions.ipynb (make test-notebook).

    /usr/bin/python3 -m unittest discover -s python/tests -t python/tests
"""

import json
import os
import pickle
import stat
import subprocess
import sys
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import isched  # noqa: E402
from isched import runs  # noqa: E402
from fakecli import FakeCLITest  # noqa: E402

# The fake isched: answers call N with $FAKE_ANSWERS[N] (the last one
# again once they run out): {"stdout": ..., "rc": ...}; appends each argv
# to $FAKE_CALLS (one JSON list per line). @OUTPUT@, @ERROR@ and @CKPT@ in
# stdout are the call's --output, --error and --checkpoint-dir, as isched
# submit --json prints the paths it was given.
FAKE = textwrap.dedent("""\
    #!%s
    import json, os, sys
    with open(os.environ["FAKE_CALLS"], "a") as f:
        f.write(json.dumps(sys.argv[1:]) + "\\n")
    with open(os.environ["FAKE_CALLS"]) as f:
        n = sum(1 for _ in f)
    with open(os.environ["FAKE_ANSWERS"]) as f:
        answers = json.load(f)
    a = answers[min(n, len(answers)) - 1]
    out = a.get("stdout", "")
    for name, flag in (("@OUTPUT@", "--output"), ("@ERROR@", "--error"), ("@CKPT@", "--checkpoint-dir")):
        if flag in sys.argv:
            out = out.replace(name, sys.argv[sys.argv.index(flag) + 1])
    sys.stdout.write(out)
    sys.stderr.write(a.get("stderr", ""))
    sys.exit(a.get("rc", 0))
    """) % sys.executable


def coord(state, **kw):
    """A coordinator record (status --json) as JSON text."""
    return json.dumps(dict({"v": 1, "source": "coordinator", "job_id": 42, "lineage": "lab-u1-train-1", "state": state,
                            "step": -1, "total_iters": 0, "eta": None}, **kw))


def slurm(state, **kw):
    """A Slurm-only record (status --json) as JSON text."""
    return json.dumps(dict({"v": 1, "source": "slurm", "job_id": 42, "lineage": "lab-u1-train-1", "state": state}, **kw))


def square(x):
    return x * x


class Fake(FakeCLITest):
    FAKE = FAKE

    def setUp(self):
        super().setUp()
        os.environ["FAKE_CALLS"] = os.path.join(self.tmp.name, "calls")
        os.environ["FAKE_ANSWERS"] = os.path.join(self.tmp.name, "answers.json")
        os.environ["XDG_CACHE_HOME"] = os.path.join(self.tmp.name, "cache")

    def answers(self, *outs, rc=0):
        with open(os.environ["FAKE_ANSWERS"], "w") as f:
            json.dump([{"stdout": o, "rc": rc} for o in outs], f)

    def run_job(self, job, argv):
        """Run the command the submission gave, as the job would; then
        Slurm says the job completed (or failed)."""
        cmd = argv[argv.index("--") + 1:]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, cwd=self.tmp.name)
        state = "COMPLETED" if p.returncode == 0 else "FAILED"
        self.answers(slurm(state, job_id=77, exit_status=p.returncode))
        return p

    def calls(self):
        try:
            with open(os.environ["FAKE_CALLS"]) as f:
                return [json.loads(line) for line in f]
        except FileNotFoundError:
            return []


class Jobs(Fake):
    def test_submit_returns_a_job_from_the_json(self):
        self.answers(json.dumps({"job_id": 4211, "cluster": "lab", "lineage": "lab-u1-train-9", "partitions": ["cpu"],
                                 "ideal": "cpu", "output": "/h/a/out-%j.txt", "error": None, "checkpoint_dir": "/h/a/ck"}))
        job = isched.submit(["python3", "train.py"], samples=100, batch=32)
        self.assertIsInstance(job, isched.Job)
        self.assertEqual((job, int(job), str(job), job.lineage, job.output, job.error), (4211, 4211, "4211", "lab-u1-train-9",
                                                                                        "/h/a/out-%j.txt", None))
        self.assertEqual(self.calls(), [["submit", "--json", "--samples", "100", "--batch", "32", "--", "python3", "train.py"]])

    def test_submit_of_an_array_is_one_job_per_element(self):
        self.answers(json.dumps({"job_id": 4300, "cluster": "lab", "lineage": "lab-u1-sweep-2", "partitions": ["gpu"], "ideal": "gpu",
                                 "output": "/h/a/isched-lab-u1-sweep-2_%a.out", "error": None, "checkpoint_dir": "/h/a/ck",
                                 "array": "0-2:2", "elements": 2, "tasks": [0, 2]}),
                     coord("RUNNING", job_id=4301, lineage="lab-u1-sweep-2_2", step=10, total_iters=100))
        jobs = isched.submit(["python3", "train.py"], array="0-2:2")
        self.assertEqual([(str(j), j.task, j.lineage, j.checkpoint_dir) for j in jobs],
                         [("4300_0", 0, "lab-u1-sweep-2_0", "/h/a/ck/0"), ("4300_2", 2, "lab-u1-sweep-2_2", "/h/a/ck/2")])
        self.assertEqual(runs.expand_pattern(jobs[1].output, jobs[1]), "/h/a/isched-lab-u1-sweep-2_2.out")
        self.assertEqual(runs.expand_pattern("/h/a/%A_%a-%j.out", jobs[1]), "/h/a/4300_2-%j.out")
        self.assertEqual(jobs[1].progress.step, 10)
        self.assertNotEqual(jobs[0], jobs[1])
        self.assertEqual(self.calls(), [["submit", "--json", "--array", "0-2:2", "--", "python3", "train.py"],
                                        ["status", "--json", "4300_2"]])

    def test_submit_of_a_function_says_where_to_go(self):
        with self.assertRaisesRegex(TypeError, "Executor"):
            isched.submit(square)
        self.assertEqual(self.calls(), [])

    def test_wait_follows_the_coordinator_until_ended(self):
        self.answers(coord("PENDING"), coord("RUNNING", step=500, total_iters=1000, eta="2026-11-28T17:00:00.000Z"),
                     coord("ENDED", step=1000, total_iters=1000, exit_status=0))
        job = runs.Job(42)
        self.assertEqual(job.state, "PENDING")
        p = job.progress
        self.assertEqual((p.step, p.total, p.fraction, p.eta.hour), (500, 1000, 0.5, 17))
        rec = job.wait(every=0.01)
        self.assertEqual(rec["state"], "ENDED")
        self.assertIsNone(job.exception())
        self.assertEqual(job.result()["step"], 1000)
        self.assertEqual(len(self.calls()), 3, "an ended record is not asked for again")
        self.assertEqual(self.calls()[0], ["status", "--json", "42"])

    def test_a_failed_end_raises(self):
        for rec, want in [(coord("ENDED", exit_status=3), "exit status 3"), (slurm("FAILED", exit_status=1), "state FAILED"),
                          (slurm("CANCELLED", exit_status=143), "state CANCELLED")]:
            with self.subTest(rec=rec):
                self.answers(rec)
                with self.assertRaisesRegex(isched.JobError, want) as cm:
                    runs.Job(42).result()
                self.assertEqual(cm.exception.record["job_id"], 42)

    def test_slurm_says_when_no_coordinator_follows(self):
        self.answers(slurm("PENDING"), slurm("RUNNING"), slurm("COMPLETED", exit_status=0))
        self.assertEqual(runs.Job(42).wait(every=0.01)["state"], "COMPLETED")
        # a Slurm end is no end while the coordinator's record follows the run
        self.assertFalse(runs.over({"source": "coordinator", "state": "COMPLETED"}))
        self.assertTrue(runs.over({"source": "slurm", "state": "TIMEOUT"}))

    def test_wait_times_out(self):
        self.answers(coord("RUNNING"))
        with self.assertRaisesRegex(TimeoutError, "job 42 .*not over after 0.05s: state RUNNING"):
            runs.Job(42, lineage="l").wait(timeout=0.05, every=0.01)

    def test_cancel_runs_isched_stop(self):
        self.answers("cancelled job 42\n")
        self.assertIn("cancelled", runs.Job(42).cancel())
        self.assertEqual(self.calls(), [["stop", "42"]])

    def test_output_with_slurm_patterns(self):
        out = os.path.join(self.tmp.name, "run-%j.out")
        job = runs.Job(42, output=out, error=None)
        self.assertIsNone(job.stdout(), "not written yet")
        with open(os.path.join(self.tmp.name, "run-42.out"), "w") as f:
            f.write("epoch 1\n")
        self.assertEqual((job.stdout(), job.stderr()), ("epoch 1\n", None))
        self.assertEqual(runs.expand_pattern("/a/%x-%%j-%A", job), "/a/%x-%j-42")

    def test_jobs_lists_your_runs(self):
        self.answers("[%s, %s]" % (coord("RUNNING"), slurm("PENDING", job_id=43, lineage="lab-u1-fn-2")))
        got = isched.jobs()
        self.assertEqual([(int(j), j.lineage) for j in got], [(42, "lab-u1-train-1"), (43, "lab-u1-fn-2")])


class Functions(Fake):
    """The Executor's side with the fake CLI, and its runner run here on the
    call directory as the job would run it."""

    def submit(self, fn, *args, **kwargs):
        self.answers(json.dumps({"job_id": 77, "cluster": "lab", "lineage": "lab-u1-fn-1", "partitions": ["cpu"], "ideal": "cpu",
                                 "output": "OUT", "error": "ERR", "checkpoint_dir": "CK"}))
        ex = isched.Executor(partition_ideal="cpu", time="5")
        job = ex.submit(fn, *args, **kwargs)
        argv = self.calls()[-1]
        return job, argv

    def test_a_notebook_function_runs_and_returns(self):
        offset = 3
        job, argv = self.submit(lambda x, y=0: x * x + y + offset, 4, y=1)  # by value: cloudpickle
        cmd = argv[argv.index("--") + 1:]
        self.assertEqual(cmd[:2], [sys.executable, runs.RUNNER])
        d = cmd[2]
        self.assertEqual(job.calldir, d)
        self.assertEqual(stat.S_IMODE(os.stat(d).st_mode), 0o700)
        self.assertTrue(d.startswith(os.path.join(self.tmp.name, "cache", "isched", "functions") + os.sep))
        for flag, want in [("--output", os.path.join(d, "stdout")), ("--error", os.path.join(d, "stderr")),
                           ("--checkpoint-dir", os.path.join(d, "checkpoints")), ("--job-name", "lambda"),
                           ("--partition-ideal", "cpu"), ("--time", "5")]:
            self.assertEqual(argv[argv.index(flag) + 1], want, flag)
        p = self.run_job(job, argv)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(job.result(), 20)
        self.assertIsNone(job.exception())

    def test_an_exception_comes_back_with_its_traceback(self):
        def boom(n):
            raise ValueError("bad input %d" % n)

        job, argv = self.submit(boom, 7)
        p = self.run_job(job, argv)
        self.assertEqual(p.returncode, 1)
        self.assertIn("ValueError: bad input 7", p.stderr)
        with self.assertRaisesRegex(ValueError, "bad input 7") as cm:
            job.result()
        self.assertIsInstance(cm.exception.__cause__, runs.RemoteTraceback)
        self.assertIn("in boom", str(cm.exception.__cause__))
        self.assertIsInstance(job.exception(), ValueError)

    def test_a_job_that_ends_without_a_result(self):
        job, argv = self.submit(square, 3)
        job.error = os.path.join(self.tmp.name, "err")
        with open(job.error, "w") as f:
            f.write("slurmstepd: error: *** JOB 77 CANCELLED ***\nisched-wrapper: summary: exit=143\n")
        self.answers(slurm("CANCELLED", job_id=77, exit_status=143))
        with self.assertRaisesRegex(isched.JobError, r"ended without a result \(state CANCELLED, exit status 143\): "
                                                     r"slurmstepd: error: \*\*\* JOB 77 CANCELLED \*\*\*$"):
            job.result()

    def test_the_runner_does_not_shadow_the_users_modules(self):
        job, argv = self.submit(lambda: list(sys.path))
        self.run_job(job, argv)
        path = job.result()
        self.assertNotIn(os.path.dirname(runs.RUNNER), path, "the isched package directory would shadow lightning, hf")
        self.assertEqual(path[0], "", "the working directory first, as python -c")
        self.assertIn(os.path.dirname(HERE), path, "the caller's sys.path")

    def test_refuses_a_folder_others_may_write(self):
        shared = os.path.join(self.tmp.name, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o777)
        self.answers(json.dumps({"job_id": 1, "lineage": "l"}))
        with self.assertRaisesRegex(PermissionError, "may be written by other users"):
            isched.Executor(folder=shared).submit(square, 2)
        self.assertEqual(self.calls(), [], "nothing submitted")

    def test_refuses_a_result_others_may_have_written(self):
        job, argv = self.submit(square, 3)
        self.run_job(job, argv)
        os.chmod(os.path.join(job.calldir, "result.pkl"), 0o666)
        with self.assertRaisesRegex(PermissionError, "result.pkl may be written by other users"):
            job.result()

    def test_the_runner_refuses_a_call_others_may_have_written(self):
        job, argv = self.submit(square, 3)
        os.chmod(job.calldir, 0o777)
        p = self.run_job(job, argv)
        self.assertEqual(p.returncode, 2)
        self.assertIn("may be written by other users", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(job.calldir, "result.pkl")))

    @unittest.skipUnless(os.getuid() == 0, "needs root to give the directory to another user")
    def test_the_runner_refuses_a_call_of_another_user(self):
        job, argv = self.submit(square, 3)
        os.chown(os.path.join(job.calldir, "call.pkl"), 65534, 65534)  # nobody: as bob planting his own
        p = self.run_job(job, argv)
        self.assertEqual(p.returncode, 2)
        self.assertIn("belongs to uid 65534", p.stderr)


def negative_fails(x):
    if x < 0:
        raise ValueError("negative item %d" % x)
    return x * 10


class Map(Fake):
    """Executor.map: one array, one call directory with a subdirectory per
    element; each element run here as Slurm would run it
    (SLURM_ARRAY_TASK_ID)."""

    def map(self, fn, *iterables, **flags):
        n = len(list(zip(*iterables)))
        self.answers(json.dumps({"job_id": 90, "cluster": "lab", "lineage": "lab-u1-fn-2", "partitions": ["cpu"],
                                 "ideal": "cpu", "output": "@OUTPUT@", "error": "@ERROR@", "checkpoint_dir": "@CKPT@",
                                 "array": "0-%d" % (n - 1), "elements": n, "tasks": list(range(n))}))
        jobs = isched.Executor(partition_ideal="cpu", **flags).map(fn, *iterables)
        return jobs, self.calls()[-1]

    def run_element(self, argv, task):
        """Run the array's command as element task (None: without
        SLURM_ARRAY_TASK_ID); the completed process."""
        env = dict(os.environ)
        env.pop("SLURM_ARRAY_TASK_ID", None)
        if task is not None:
            env["SLURM_ARRAY_TASK_ID"] = str(task)
        return subprocess.run(argv[argv.index("--") + 1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, cwd=self.tmp.name, env=env)

    def results(self, d):
        """The result files under the call directory d."""
        return sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs if f == "result.pkl")

    def test_map_submits_one_array_and_returns_in_order(self):
        jobs, argv = self.map(pow, [2, 3, 4], [10, 2, 1])
        self.assertEqual(len(self.calls()), 1, "one submission")
        d = argv[argv.index("--") + 3]
        for flag, want in [("--array", "0-2"), ("--output", os.path.join(d, "%a", "stdout")),
                           ("--error", os.path.join(d, "%a", "stderr")), ("--checkpoint-dir", os.path.join(d, "checkpoints")),
                           ("--job-name", "pow")]:
            self.assertEqual(argv[argv.index(flag) + 1], want, flag)
        self.assertEqual([(j.key, j.lineage, j.calldir, j.checkpoint_dir) for j in jobs],
                         [("90_%d" % t, "lab-u1-fn-2_%d" % t, os.path.join(d, str(t)), os.path.join(d, "checkpoints", str(t)))
                          for t in range(3)])
        for t in range(3):
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(d, str(t))).st_mode), 0o700)
            with open(os.path.join(d, str(t), "call.pkl"), "rb") as f:
                self.assertEqual(pickle.load(f)[1], [(2, 10), (3, 2), (4, 1)][t])
        self.assertFalse(os.path.exists(os.path.join(d, "call.pkl")), "no call outside the elements'")
        for t in (2, 0, 1):  # Slurm runs the elements in any order
            p = self.run_element(argv, t)
            self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.results(d), ["0/result.pkl", "1/result.pkl", "2/result.pkl"])
        self.answers(slurm("COMPLETED", exit_status=0))
        self.assertEqual([j.result() for j in jobs], [1024, 9, 4])
        self.assertEqual([c for c in self.calls() if c[0] == "status"], [["status", "--json", "90_%d" % t] for t in range(3)])

    def test_a_failing_element_has_its_own_exception(self):
        jobs, argv = self.map(negative_fails, [1, -2, 3])
        codes = [self.run_element(argv, t).returncode for t in range(3)]
        self.assertEqual(codes, [0, 1, 0])
        self.answers(slurm("COMPLETED", exit_status=0), slurm("FAILED", exit_status=1), slurm("COMPLETED", exit_status=0))
        self.assertEqual([type(j.exception()) for j in jobs], [type(None), ValueError, type(None)])
        with self.assertRaisesRegex(ValueError, "negative item -2") as cm:
            jobs[1].result()
        self.assertIn("in negative_fails", str(cm.exception.__cause__))
        self.assertEqual((jobs[0].result(), jobs[2].result()), (10, 30))

    def test_an_element_without_a_result_shows_its_own_stderr(self):
        jobs, argv = self.map(square, [1, 2])
        with open(os.path.join(jobs[1].calldir, "stderr"), "w") as f:
            f.write("slurmstepd: error: *** JOB 92 CANCELLED ***\n")
        self.answers(slurm("CANCELLED", job_id=92, exit_status=143))
        with self.assertRaisesRegex(isched.JobError, r"job 90_1 \(lab-u1-fn-2_1\) ended without a result .*JOB 92 CANCELLED"):
            jobs[1].result()

    def test_cancel_of_an_element_stops_that_element(self):
        jobs, _ = self.map(square, [1, 2, 3])
        self.answers("cancelled job 93 (lineage lab-u1-fn-2_1)\n")
        jobs[1].cancel()
        self.assertEqual(self.calls()[-1], ["stop", "90_1"])

    def test_an_element_loads_only_its_own_call(self):
        jobs, argv = self.map(square, [1, 2])
        d = os.path.dirname(jobs[0].calldir)
        for task, want in [(2, "holds no call of element 2"), (None, "SLURM_ARRAY_TASK_ID=''"),
                           ("../0", r"SLURM_ARRAY_TASK_ID='\.\./0' names no element"), ("-1", "names no element")]:
            with self.subTest(task=task):
                p = self.run_element(argv, task)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertRegex(p.stderr, want)
        os.rename(jobs[1].calldir, jobs[1].calldir + ".gone")
        os.symlink(jobs[0].calldir, jobs[1].calldir)  # element 1's directory is element 0's
        p = self.run_element(argv, 1)
        self.assertEqual(p.returncode, 2)
        self.assertIn("not a directory (element 1's call)", p.stderr)
        self.assertEqual(self.results(d), [], "no element ran")

    def test_private_checks_hold_for_the_elements(self):
        jobs, argv = self.map(square, [1, 2, 3])
        d = os.path.dirname(jobs[0].calldir)
        for path in [jobs[1].calldir, os.path.join(jobs[1].calldir, "call.pkl"), os.path.join(d, "path.pkl"),
                     os.path.join(d, "array")]:
            with self.subTest(path=os.path.relpath(path, d)):
                mode = stat.S_IMODE(os.stat(path).st_mode)
                os.chmod(path, 0o777)
                p = self.run_element(argv, 1)
                os.chmod(path, mode)
                self.assertEqual(p.returncode, 2)
                self.assertIn("%s may be written by other users" % path, p.stderr)
        self.assertEqual(self.results(d), [])
        self.assertEqual(self.run_element(argv, 1).returncode, 0)
        os.chmod(os.path.join(jobs[1].calldir, "result.pkl"), 0o666)
        self.answers(slurm("COMPLETED", exit_status=0))
        with self.assertRaisesRegex(PermissionError, "1/result.pkl may be written by other users"):
            jobs[1].result()

    def test_map_refuses_an_array_flag(self):
        with self.assertRaisesRegex(TypeError, "array='0-3' is no flag of an executor"):
            self.map(square, [1, 2], array="0-3")
        with self.assertRaisesRegex(TypeError, "array="):
            isched.Executor(array="0-3").submit(square, 1)
        self.assertEqual(self.calls(), [])
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "cache", "isched", "functions")), "nothing written")

    def test_map_refuses_more_items_than_isched_lists(self):
        n = runs.MAX_MAP_ITEMS + 1
        with self.assertRaisesRegex(ValueError, "map of %d items: at most %d go in one array" % (n, n - 1)):
            isched.Executor().map(square, range(n))
        self.assertEqual(self.calls(), [])
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "cache", "isched", "functions")), "nothing written")

    def test_the_limit_is_the_one_of_isched_submit(self):
        """submit --json lists the tasks (what array_jobs follows) up to
        internal/slurm/array.go's MaxListedTasks."""
        with open(os.path.join(os.path.dirname(os.path.dirname(HERE)), "internal", "slurm", "array.go")) as f:
            go = f.read()
        self.assertIn("const MaxListedTasks = %d\n" % runs.MAX_MAP_ITEMS, go)

    def test_map_of_one_item_or_none(self):
        self.assertEqual(isched.Executor().map(square, []), [])
        self.assertEqual(self.calls(), [])
        self.answers(json.dumps({"job_id": 5, "lineage": "l"}))
        jobs = isched.Executor().map(square, [4])
        self.assertEqual([(j.key, j.task) for j in jobs], [("5", None)])
        self.assertNotIn("--array", self.calls()[0])
        self.assertEqual(self.calls()[0][-1], jobs[0].calldir, "a plain call directory")
        self.assertTrue(os.path.exists(os.path.join(jobs[0].calldir, "call.pkl")))
        self.assertEqual(self.run_job(jobs[0], self.calls()[0]).returncode, 0)
        self.assertEqual(jobs[0].result(), 16)


if __name__ == "__main__":
    unittest.main()

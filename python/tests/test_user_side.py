"""Tests of the user's side from Python: isched.cli (estimate, plan, submit,
status, report run the isched command), isched.tables (Table 2) and
isched.summarize (the same code as scripts/model_summary.py).

The isched command is a fake written per test (FAKE below): it records its
argv and prints what the test asks for, so the argument lists, the JSON
parsing and the error path are checked without Redis or Slurm. testdata/
*_nostate.json are real `isched estimate/plan --json` output (bin/isched,
examples/site-lab.json, internal/cli/testdata/resnet18_128.json, --receipts
none --state none, batch 8,32); plan_lab_state.json is the plan of
internal/cli/testdata/plan_lab.txt (an agent snapshot with waits) written
out as the JSON the CLI prints for it.

    /usr/bin/python3 -m unittest discover -s python/tests -t python/tests
"""

import contextlib
import datetime
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))

import isched  # noqa: E402
from isched import cli, tables  # noqa: E402
from fakecli import FakeCLITest  # noqa: E402

# The fake isched: records argv (and the --model file's content, when it
# exists) as JSON in $FAKE_RECORD, prints $FAKE_STDOUT and $FAKE_STDERR,
# exits $FAKE_RC.
FAKE = textwrap.dedent("""\
    #!%s
    import json, os, sys
    argv = sys.argv[1:]
    model = None
    if "--model" in argv and os.path.exists(argv[argv.index("--model") + 1]):
        with open(argv[argv.index("--model") + 1]) as f:
            model = f.read()
    with open(os.environ["FAKE_RECORD"], "w") as f:
        json.dump({"argv": argv, "model": model}, f)
    sys.stdout.write(os.environ.get("FAKE_STDOUT", ""))
    sys.stderr.write(os.environ.get("FAKE_STDERR", ""))
    sys.exit(int(os.environ.get("FAKE_RC", "0")))
    """) % sys.executable



def testdata(name):
    with open(os.path.join(HERE, "testdata", name)) as f:
        return f.read()


class FlagArgs(unittest.TestCase):
    def test_kwargs_become_flags_in_order(self):
        got = cli.flag_args({"samples": 20000, "batch": [8, 16, 32, 64], "site": "lab.json", "epochs": None,
                             "dry_run": True, "pooled": False, "migration_overhead": datetime.timedelta(minutes=5),
                             "partition_ideal": "gpu"})
        self.assertEqual(got, ["--samples", "20000", "--batch", "8,16,32,64", "--site", "lab.json", "--dry-run",
                               "--pooled=false", "--migration-overhead", "300s", "--partition-ideal", "gpu"])

    def test_repeatable_flags_repeat(self):
        got = cli.flag_args({"sbatch_arg": ["--exclusive", "--hint=nomultithread"], "wrapper_arg": ("--x=1",)})
        self.assertEqual(got, ["--sbatch-arg", "--exclusive", "--sbatch-arg", "--hint=nomultithread",
                               "--wrapper-arg", "--x=1"])

    def test_path_like_values(self):
        import pathlib

        self.assertEqual(cli.flag_args({"site": pathlib.Path("/etc/isched/site.json")}),
                         ["--site", "/etc/isched/site.json"])


class FakeCLI(FakeCLITest):
    FAKE = FAKE

    def setUp(self):
        super().setUp()
        self.record = os.path.join(self.tmp.name, "record.json")
        os.environ["FAKE_RECORD"] = self.record
        for k in ("FAKE_STDOUT", "FAKE_STDERR", "FAKE_RC"):
            os.environ.pop(k, None)

    def answer(self, stdout="", stderr="", rc=0):
        os.environ["FAKE_STDOUT"] = stdout
        os.environ["FAKE_STDERR"] = stderr
        os.environ["FAKE_RC"] = str(rc)

    def called(self):
        with open(self.record) as f:
            return json.load(f)


class Commands(FakeCLI):
    def test_estimate_argv_and_rows(self):
        self.answer(testdata("estimate_lab_nostate.json"))
        rows = isched.estimate("model.json", samples=20000, epochs=3, batch=[8, 32], site="lab.json",
                               receipts="none", state="none")
        self.assertEqual(self.called()["argv"],
                         ["estimate", "--json", "--model", "model.json", "--samples", "20000", "--epochs", "3",
                          "--batch", "8,32", "--site", "lab.json", "--receipts", "none", "--state", "none"])
        self.assertEqual(rows, json.loads(testdata("estimate_lab_nostate.json")))
        self.assertEqual([(r["batch"], r["node_type"]) for r in rows][:2], [(8, "lab-dev"), (8, "lab-cpu")])

    def test_unset_flags_are_left_to_the_cli(self):
        self.answer("[]")
        isched.plan("m.json", batch=32)
        self.assertEqual(self.called()["argv"], ["plan", "--json", "--model", "m.json", "--batch", "32"])

    def test_model_dict_goes_through_a_temporary_file(self):
        summary = {"v": 1, "name": "tiny", "parameters": 10}
        self.answer("[]")
        isched.plan(summary, samples=1, batch=8)
        rec = self.called()
        path = rec["argv"][rec["argv"].index("--model") + 1]
        self.assertEqual(json.loads(rec["model"]), summary)
        self.assertFalse(os.path.exists(path), "the temporary model file is removed after the call")

    def test_submit_runs_the_command_without_a_shell(self):
        self.answer('{"job_id": 4211, "lineage": "lab-u1-train-1"}\n')
        cmd = ["python3", "train.py", "--tag", "a b; rm -rf / $(id) `id`", "*"]
        job = isched.submit(cmd, model="m.json", samples=100, batch=32, partition_ideal="gpu")
        self.assertEqual(job, 4211)
        self.assertEqual(self.called()["argv"],
                         ["submit", "--json", "--model", "m.json", "--samples", "100", "--batch", "32", "--partition-ideal",
                          "gpu", "--"] + cmd)

    def test_submit_dry_run_returns_the_script(self):
        self.answer("#!/bin/bash\n#SBATCH --partition=gpu\n")
        out = isched.submit(["python3", "train.py"], dry_run=True)
        self.assertEqual(out, "#!/bin/bash\n#SBATCH --partition=gpu\n")
        self.assertEqual(self.called()["argv"], ["submit", "--dry-run", "--", "python3", "train.py"])

    def test_submit_refuses_a_command_string(self):
        with self.assertRaisesRegex(TypeError, "list of arguments"):
            isched.submit("python3 train.py; rm -rf /")
        self.assertFalse(os.path.exists(self.record), "nothing ran")

    def test_submit_without_a_job_id_is_an_error(self):
        self.answer("something else\n")
        with self.assertRaisesRegex(ValueError, "printed no JSON"):
            isched.submit(["true"])

    def test_status_and_report(self):
        self.answer('{"job_id": 4211, "state": "RUNNING", "step": 150, "total_iters": 1000}')
        st = isched.status(4211)
        self.assertEqual(self.called()["argv"], ["status", "--json", "4211"])
        self.assertEqual(st["step"], 150)
        self.answer("[]")
        self.assertEqual(isched.status(), [])
        self.assertEqual(self.called()["argv"], ["status", "--json"])
        self.answer('{"lineage": "lab-u1-x", "samples": [{"step": 1}], "attempts": []}')
        rep = isched.report("lab-u1-x", plot="run.svg")
        self.assertEqual(self.called()["argv"], ["report", "lab-u1-x", "--json", "--plot", "run.svg"])
        self.assertEqual(rep["samples"], [{"step": 1}])

    def test_status_times_parse(self):
        self.answer('{"job_id": 4211, "eta": "2026-05-09T12:28:00.123Z", "ended": null, "iter_s": 0.212}')
        st = isched.status(4211)
        utc = datetime.timezone.utc
        self.assertEqual(isched.parse_time(st["eta"]), datetime.datetime(2026, 5, 9, 12, 28, 0, 123000, tzinfo=utc))
        self.assertIsNone(isched.parse_time(st["ended"]))

    def test_parse_time(self):
        utc = datetime.timezone.utc
        cases = [
            ("2026-11-27T15:04:05.123Z", datetime.datetime(2026, 11, 27, 15, 4, 5, 123000, tzinfo=utc)),
            ("2026-11-27T15:04:05Z", datetime.datetime(2026, 11, 27, 15, 4, 5, tzinfo=utc)),
            ("2026-11-27T16:04:05.5+01:00", datetime.datetime(2026, 11, 27, 15, 4, 5, 500000, tzinfo=utc)),
            ("2026-11-27T10:04:05.123456789-05:00", datetime.datetime(2026, 11, 27, 15, 4, 5, 123456, tzinfo=utc)),
        ]
        for text, want in cases:
            with self.subTest(text=text):
                got = isched.parse_time(text)
                self.assertEqual(got, want)
                self.assertEqual(got.utcoffset(), datetime.timedelta(0))
        for bad in ["1732719845123", "2026-11-27 15:04:05", "2026-11-27T15:04:05", 1732719845123]:
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                isched.parse_time(bad)

    def test_follow_stops_when_the_job_ended(self):
        self.answer('{"job_id": 7, "state": "ENDED", "step": 1000}')
        seen = list(isched.follow(7, every=0))
        self.assertEqual([s["state"] for s in seen], ["ENDED"])

    def test_stderr_of_a_success_is_passed_on(self):
        self.answer("[]", stderr="isched: receipts: Redis unreachable, static only\n")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            isched.estimate("m.json", batch=8)
        self.assertEqual(err.getvalue(), "isched: receipts: Redis unreachable, static only\n")


class Errors(FakeCLI):
    def test_a_failing_command_raises_with_status_and_stderr(self):
        self.answer(stderr="isched estimate: open nope.json: no such file or directory\n", rc=1)
        with self.assertRaises(isched.CLIError) as cm:
            isched.estimate("m.json", site="nope.json")
        e = cm.exception
        self.assertEqual(e.returncode, 1)
        self.assertEqual(e.stderr, "isched estimate: open nope.json: no such file or directory\n")
        self.assertEqual(e.argv[0], self.fake)
        self.assertIn("estimate exited with status 1: isched estimate: open nope.json", str(e))

    def test_a_usage_error_says_the_mistake(self):
        # as isched prints it: the mistake, then one short usage line
        stderr = ("isched estimate: unknown flag: --bogus\n"
                  "usage: isched estimate --model model.json --samples N --epochs E --batch 8,16,32 [flags] "
                  "(isched estimate --help lists the flags)\n")
        self.answer(stderr=stderr, rc=2)
        with self.assertRaises(isched.CLIError) as cm:
            isched.estimate("m.json", bogus=1)
        self.assertEqual(cm.exception.returncode, 2)
        self.assertIn("status 2: isched estimate: unknown flag: --bogus\nusage: isched estimate", str(cm.exception))
        self.assertEqual(cm.exception.stderr, stderr)

    def test_a_listing_before_the_mistake_says_its_last_line(self):
        usage = "usage: isched estimate --model model.json [flags]\n\nflags:\n      --batch string\n"
        self.answer(stderr=usage + "isched estimate: unknown flag: --bogus\n", rc=2)
        with self.assertRaises(isched.CLIError) as cm:
            isched.estimate("m.json", bogus=1)
        self.assertTrue(str(cm.exception).endswith("status 2: isched estimate: unknown flag: --bogus"))

    def test_output_that_is_not_json(self):
        self.answer("model: resnet18\n")
        with self.assertRaisesRegex(ValueError, "isched plan printed no JSON"):
            isched.plan("m.json")

    def test_the_cli_is_found_on_path_or_named(self):
        os.environ.pop("ISCHED_CLI")
        os.environ["PATH"] = self.tmp.name
        self.assertEqual(cli.cli_path(), self.fake)
        os.environ["PATH"] = os.path.join(self.tmp.name, "empty")
        with self.assertRaisesRegex(FileNotFoundError, "ISCHED_CLI"):
            isched.status(1)
        os.environ["ISCHED_CLI"] = os.path.join(self.tmp.name, "missing")
        with self.assertRaisesRegex(FileNotFoundError, "cannot run .*missing.*ISCHED_CLI"):
            isched.status(1)


def pandas_missing():
    try:
        import pandas  # noqa: F401
    except ImportError:
        return True
    return False


class Frames(FakeCLI):
    def test_as_frame_without_pandas_says_so(self):
        self.answer("[]")
        with mock.patch.dict(sys.modules, {"pandas": None}):  # import pandas raises ImportError
            with self.assertRaisesRegex(ImportError, "as_frame=True needs pandas"):
                isched.estimate("m.json", as_frame=True)

    @unittest.skipIf(pandas_missing(), "pandas is not installed (optional; as_frame=True needs it)")
    def test_as_frame(self):
        self.answer(testdata("plan_lab_nostate.json"))
        df = isched.plan("m.json", batch=[8, 32], as_frame=True)
        self.assertEqual(list(df["batch"].unique()), [8, 32])
        self.assertIn("partition", df.columns)
        self.answer(testdata("estimate_lab_nostate.json"))
        df = isched.estimate("m.json", as_frame=True)
        self.assertEqual(len(df), 8)


class Table2(unittest.TestCase):
    def setUp(self):
        self.est = json.loads(testdata("estimate_lab_nostate.json"))
        self.plans = json.loads(testdata("plan_lab_nostate.json"))

    def test_rows_without_cluster_state(self):
        rows = tables.table2(self.est, self.plans)
        self.assertEqual(len(rows), 12, "6 feasible partitions x 2 batch sizes")
        self.assertEqual([tuple(r) for r in rows][0], tables.TABLE2_COLUMNS)
        first = rows[0]
        self.assertEqual((first["batch"], first["node_type"], first["partition"]), (8, "lab-gpu", "scavenger"))
        self.assertAlmostEqual(first["memory_gib"], 613357344 / 2**30)
        self.assertAlmostEqual(first["hours"], self.plans[0]["options"][0]["run_s"] / 3600)
        self.assertEqual(first["cost"], self.plans[0]["options"][0]["cost"])
        self.assertIsNone(first["idle"])
        self.assertIsNone(first["wait_h"])
        self.assertIsNone(first["total_h"])

    def test_rows_with_waits_and_idle(self):
        plans = json.loads(testdata("plan_lab_state.json"))
        for r in self.est:  # what the estimate says with the same snapshot
            for p in r["partitions"]:
                p["idle_now"] = p["name"] in ("cpu", "dev") or (p["name"] == "scavenger" and r["node_type"] == "lab-cpu")
        rows = {(r["partition"], r["node_type"]): r for r in tables.table2(self.est, plans)}
        self.assertEqual(rows[("gpu", "lab-gpu")]["idle"], False)
        self.assertEqual(rows[("gpu", "lab-gpu")]["wait_h"], 1.0)
        self.assertAlmostEqual(rows[("gpu", "lab-gpu")]["total_h"], 8186.259205535 / 3600)
        self.assertEqual(rows[("dev", "lab-dev")]["idle"], True)
        self.assertEqual(rows[("dev", "lab-dev")]["wait_h"], 0)

    def test_mismatched_estimate_and_plan(self):
        est = [r for r in self.est if r["batch"] != 32]
        with self.assertRaisesRegex(ValueError, "no row for batch 32 on lab-gpu"):
            tables.table2(est, self.plans)

    def test_migration_plans(self):
        rows = tables.migration_plans(json.loads(testdata("plan_lab_state.json")))
        self.assertEqual([(r["plan"], r["where"], r["recommended"]) for r in rows],
                         [("without", "gpu", False), ("with", "dev -> gpu", True),
                          ("cheapest", "scavenger/lab-gpu", False)])
        self.assertEqual(rows[1]["total_h"], 2.1)
        self.assertAlmostEqual(rows[0]["total_h"], 8186.259205535 / 3600)

    def test_migration_plans_without_state(self):
        rows = tables.migration_plans(self.plans)
        self.assertEqual([(r["batch"], r["plan"], r["total_h"]) for r in rows],
                         [(8, "without", None), (8, "cheapest", None), (32, "without", None), (32, "cheapest", None)])

    def test_format_table(self):
        text = tables.format_table([{"batch": 8, "idle": None, "fits": True, "hours": 1.3891}],
                                   ["batch", "hours", "fits", "idle"])
        self.assertEqual(text.splitlines(), ["BATCH  HOURS  FITS  IDLE", "8      1.39   yes   ?"])


class Summarize(unittest.TestCase):
    TINY = textwrap.dedent("""\
        import torch

        class Tiny(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
                self.bn = torch.nn.BatchNorm2d(4)
                self.drop = torch.nn.Dropout(0.5)
                self.fc = torch.nn.Linear(4 * 8 * 8, 10)

            def forward(self, x):
                x = torch.relu(self.bn(self.conv(x)))
                return self.fc(self.drop(x.flatten(1)))
        """)

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.py = os.path.join(self.tmp.name, "tiny.py")
        with open(self.py, "w") as f:
            f.write(self.TINY)
        self.ns = {}
        exec(compile(self.TINY, self.py, "exec"), self.ns)  # noqa: S102 - the test's own model

    def script(self, *args):
        out = os.path.join(self.tmp.name, "script.json")
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "model_summary.py"), "--model",
                        self.py + ":Tiny", "--input", "1,8,8", "-o", out] + list(args), check=True)
        with open(out) as f:
            return f.read()

    def test_same_summary_as_the_script(self):
        path = os.path.join(self.tmp.name, "api.json")
        got = isched.summarize(self.ns["Tiny"](), (1, 8, 8), path=path)
        text = self.script()
        self.assertEqual(got, json.loads(text))
        with open(path) as f:
            self.assertEqual(f.read(), text, "path= writes what the script writes, byte for byte")
        self.assertEqual(got["name"], "Tiny")
        self.assertEqual(got["flops_by_kind"], {"conv": 2 * 4 * 64 * 9, "linear": 2 * 10 * 256})
        self.assertEqual([r["name"] for r in got["layers"]], ["conv", "bn", "drop", "fc"])

    def test_options_match_the_script(self):
        got = isched.summarize(self.ns["Tiny"](), [1, 8, 8], batch=4, name="tiny", layers=False)
        self.assertEqual(got, json.loads(self.script("--batch", "4", "--name", "tiny", "--no-layers")))
        self.assertNotIn("layers", got)

    def test_the_live_model_is_left_as_it_was(self):
        import torch

        net = self.ns["Tiny"]()
        net.eval()
        net.drop.train()
        torch.manual_seed(123)
        before = torch.get_rng_state()
        isched.summarize(net, (1, 8, 8))
        self.assertFalse(net.training)
        self.assertTrue(net.drop.training)
        self.assertFalse(net.bn.training)
        self.assertTrue(torch.equal(torch.get_rng_state(), before), "the global RNG state is restored")

    def test_autocast_emulation(self):
        """saved_half_bytes_per_sample: what autograd keeps under CUDA's
        autocast, emulated on the CPU. A conv net keeps about half its
        float32 bytes; a block whose layer norm and softmax autocast keeps in
        float32 keeps more of them; the live model is left in float32."""
        import torch

        torch.manual_seed(0)
        conv = isched.summarize(self.ns["Tiny"](), (1, 8, 8), layers=False)
        self.assertIn("saved_half_bytes_per_sample", conv)
        conv_ratio = conv["saved_half_bytes_per_sample"] / conv["saved_bytes_per_sample"]
        self.assertGreater(conv_ratio, 0.4)
        self.assertLess(conv_ratio, 0.75)

        class Attn(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = torch.nn.LayerNorm(32)
                self.qkv = torch.nn.Linear(32, 96)

            def forward(self, x):
                q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
                w = torch.softmax(q @ k.transpose(1, 2) / 32 ** 0.5, dim=-1)
                return x + w @ v

        m = Attn()
        att = isched.summarize(m, (16, 32), layers=False)
        att_ratio = att["saved_half_bytes_per_sample"] / att["saved_bytes_per_sample"]
        self.assertGreater(att_ratio, conv_ratio, "layer norm and softmax stay float32 under autocast")
        self.assertEqual({p.dtype for p in m.parameters()}, {torch.float32})

    def test_bad_arguments(self):
        net = self.ns["Tiny"]()
        for shape in ((), (1, 0, 8), "abc"):
            with self.assertRaisesRegex(isched.SummaryError, "input shape"):
                isched.summarize(net, shape)
        with self.assertRaisesRegex(isched.SummaryError, "batch must be at least 1"):
            isched.summarize(net, (1, 8, 8), batch=0)
        with self.assertRaisesRegex(isched.SummaryError, "forward pass of Tiny on an input of shape \\[2, 3, 8, 8\\]"):
            isched.summarize(net, (3, 8, 8))

    def test_import_stays_light(self):
        code = ("import sys, isched; isched.step(1); "
                "print(sorted(m for m in ('torch', 'pandas', 'subprocess', 'isched.cli', 'isched.summary') "
                "if m in sys.modules))")
        env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
        out = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, check=True,
                             universal_newlines=True).stdout
        self.assertEqual(out.strip(), "[]")


if __name__ == "__main__":
    unittest.main()

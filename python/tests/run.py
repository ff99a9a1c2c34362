"""Run python/tests (what `make test-python` runs), and refuse skips in CI.

    python3 python/tests/run.py [-v]

Discovers the tests as `python3 -m unittest discover -s python/tests -t
python/tests` does, after printing the Python, torch, Lightning,
transformers and accelerate it runs with. At the end it lists every skipped
test with its reason. Under CI (CI=true in the environment) a skip fails
the run unless the project's one list of allowed skips, .ci/allowed-skips,
names the test on a line "python <test id> <reason>" (the Go tests' lines
there are read by scripts/testreport): the real-framework tests are skipped only where the frameworks are
missing, and CI installs them (scripts/python-venv), so a skip there means
they did not run.

The tests run offline (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE: no model or
data set is ever downloaded) with HF_HOME in a temporary directory.
"""

import importlib
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ALLOWED = os.path.join(os.path.dirname(os.path.dirname(HERE)), ".ci", "allowed-skips")
FRAMEWORKS = ("torch", "lightning", "pytorch_lightning", "transformers", "accelerate")


def versions():
    out = ["python %s (%s)" % (sys.version.split()[0], sys.executable)]
    for name in FRAMEWORKS:
        try:
            v = getattr(importlib.import_module(name), "__version__", "?")
        except Exception as e:  # noqa: BLE001 - any import failure is "not here"
            v = "not importable (%s: %s)" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        out.append("%s %s" % (name, v))
    return out


def allowed_skips(path=ALLOWED):
    """{test id: reason} from the lines "python <test id> <reason>" of the
    skip list (# comments; other lines are the Go tests'). A line without a
    reason is an error: every allowed skip says why."""
    allowed = {}
    if not os.path.exists(path):
        return allowed
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            if parts[0] != "python":
                continue
            if len(parts) < 3:
                raise SystemExit("%s:%d: %r has no reason" % (path, n, line))
            allowed[parts[1]] = parts[2]
    return allowed


def in_ci():
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    verbosity = 2 if "-v" in argv else 1
    hf_home = tempfile.mkdtemp(prefix="isched-test-hf-")
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=hf_home,
                      TOKENIZERS_PARALLELISM="false")
    try:
        print("test-python:", "; ".join(versions()), flush=True)
        suite = unittest.defaultTestLoader.discover(start_dir=HERE, top_level_dir=HERE)
        result = unittest.TextTestRunner(verbosity=verbosity).run(suite)
    finally:
        shutil.rmtree(hf_home, ignore_errors=True)
    allowed = allowed_skips()
    refused = []
    if result.skipped:
        print("\nskipped:")
    for test, reason in result.skipped:
        tid = test.id()
        ok = tid in allowed
        print("  %s: %s%s" % (tid, reason, " (allowed: %s)" % allowed[tid] if ok else ""))
        if not ok:
            refused.append(tid)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    passed = result.testsRun - failed - len(result.skipped) - len(result.expectedFailures)
    if refused and in_ci():
        print("\nCI=true: %d test(s) skipped that must run here (not in %s):" % (len(refused), os.path.relpath(ALLOWED)))
        for tid in refused:
            print("  " + tid)
        failed += len(refused)
    print("python: %d passed, %d failed, %d skipped" % (passed, failed, len(result.skipped)))
    return 0 if failed == 0 and result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())

"""The user's side of isched from Python: estimate, plan, submit, status, report.

    import isched
    rows = isched.estimate("model.json", samples=50000, epochs=10, batch=[8, 16, 32, 64])
    plans = isched.plan(summary_dict, samples=50000, epochs=10, batch=32)
    job = isched.submit(["python3", "train.py"], model="model.json", samples=50000, batch=32)
    isched.status(job)["step"]

Each function runs the isched command (the Go CLI, the one implementation of
estimates, plans and submission) as a program with an argument list, never
through a shell, with --json where the command has it, and returns what it
printed, parsed: a list of rows (dicts) or one record. Nothing here decides
anything; the fields are the CLI's (isched estimate/plan/status/report --json).

Keyword arguments become flags: samples=20000 -> --samples 20000,
batch=[8, 16] -> --batch 8,16, pooled=False -> --pooled=false, dry_run=True ->
--dry-run, migration_overhead=timedelta(minutes=5) -> --migration-overhead 300s;
None leaves the flag out (the CLI's default). model= takes a path or a summary
dict (isched.summarize's), written to a temporary file for the call.

The command is $ISCHED_CLI, else ``isched`` on PATH. A command that fails
raises CLIError with its exit status (1 failed, 2 usage) and its stderr.
What it prints on stderr when it succeeds (notes, warnings) is passed on to
sys.stderr. as_frame=True returns a pandas DataFrame instead of the rows
(pandas is imported only then).
"""

import contextlib
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

__all__ = ["CLIError", "cli_path", "flag_args", "run", "estimate", "plan", "submit", "status", "follow", "report",
           "parse_time"]

# Flags the CLI takes once per value (submit's --sbatch-arg and --wrapper-arg):
# a list repeats the flag instead of joining the values with commas.
REPEATABLE = frozenset({"sbatch_arg", "wrapper_arg"})

# RFC 3339, as --json prints times ("2026-11-27T15:04:05.123Z", docs/json.md).
_RFC3339 = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d+))?([Zz]|[+-]\d\d:\d\d)$")


class CLIError(RuntimeError):
    """The isched command failed: argv, returncode and stderr say how."""

    def __init__(self, argv, returncode, stderr):
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        super().__init__("%s exited with status %d: %s" % (" ".join(self.argv[:2]), returncode, _gist(stderr)))


def _gist(stderr):
    """The message of stderr: a usage error's last line (the flags listed
    above it are in CLIError.stderr), else all of it."""
    text = stderr.strip()
    if not text:
        return "(nothing on stderr)"
    if text.startswith("usage:"):
        return text.splitlines()[-1]
    return text


def cli_path():
    """The isched command: $ISCHED_CLI, else isched on PATH."""
    path = os.environ.get("ISCHED_CLI")
    if path:
        return path
    path = shutil.which("isched")
    if path is None:
        raise FileNotFoundError("the isched command is not on PATH; set ISCHED_CLI to its path (e.g. bin/isched)")
    return path


def _value(v):
    if isinstance(v, datetime.timedelta):
        return "%gs" % v.total_seconds()  # a Go duration
    return str(os.fspath(v)) if isinstance(v, os.PathLike) else str(v)


def flag_args(flags):
    """The argument list of flags given as keyword arguments, in their order."""
    out = []
    for key, value in flags.items():
        if value is None:
            continue
        name = "--" + key.replace("_", "-")
        if value is True:
            out.append(name)
        elif value is False:
            out.append(name + "=false")
        elif isinstance(value, (list, tuple)) and key in REPEATABLE:
            for v in value:
                out += [name, _value(v)]
        elif isinstance(value, (list, tuple)):
            out += [name, ",".join(_value(v) for v in value)]
        else:
            out += [name, _value(value)]
    return out


def run(args, timeout=None):
    """Run isched with args (a list); its stdout. CLIError when it fails."""
    argv = [cli_path()] + [str(a) for a in args]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=timeout, check=False)
    except FileNotFoundError as e:
        raise FileNotFoundError("cannot run %s (%s): set ISCHED_CLI to the isched command" % (argv[0], e)) from e
    if done.returncode != 0:
        raise CLIError(argv, done.returncode, done.stderr)
    if done.stderr:
        sys.stderr.write(done.stderr)
    return done.stdout


def parse_time(s):
    """A time of the CLI's --json output (RFC 3339, "2026-11-27T15:04:05.123Z")
    as an aware datetime in UTC; None for None (the CLI's null: not known).
    datetime.fromisoformat reads these only from Python 3.11 on."""
    if s is None:
        return None
    m = _RFC3339.match(s) if isinstance(s, str) else None
    if m is None:
        raise ValueError("not an RFC 3339 time: %r" % (s,))
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    micro = int((m.group(7) or "0")[:6].ljust(6, "0"))
    zone = m.group(8)
    offset = datetime.timedelta(0)
    if zone not in ("Z", "z"):
        sign = -1 if zone[0] == "-" else 1
        offset = sign * datetime.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    t = datetime.datetime(year, month, day, hour, minute, second, micro, tzinfo=datetime.timezone(offset))
    return t.astimezone(datetime.timezone.utc)


def _run_json(args, timeout=None):
    out = run(args, timeout=timeout)
    try:
        return json.loads(out)
    except ValueError as e:
        raise ValueError("isched %s printed no JSON (%s): %.200r" % (args[0], e, out)) from e


@contextlib.contextmanager
def _model_file(model):
    """A path for --model: model itself, or a temporary file of a summary dict."""
    if model is None or not isinstance(model, dict):
        yield model
        return
    fd, path = tempfile.mkstemp(prefix="isched-model-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(model, f)
        yield path
    finally:
        os.unlink(path)


def _frame(rows):
    try:
        import pandas  # noqa: PLC0415 - only when asked for
    except ImportError as e:
        raise ImportError("as_frame=True needs pandas (%s); without it, use the rows (as_frame=False)" % e) from e
    return pandas.DataFrame(rows)


def _rows(cmd, model, flags, as_frame, timeout):
    with _model_file(model) as path:
        rows = _run_json([cmd, "--json"] + flag_args(dict(model=path, **flags)), timeout)
    return _frame(rows) if as_frame else rows


def estimate(model, samples=None, epochs=None, batch=None, as_frame=False, timeout=None, **flags):
    """isched estimate --json: one row per batch size and node type (memory,
    fits, iter_s, run_s, cost, partitions with idle_now, ...; docs/json.md). Other flags as keywords:
    site=, receipts=, state=, optimizer=, precision=, pooled=, migration_overhead=."""
    flags = dict(samples=samples, epochs=epochs, batch=batch, **flags)
    return _rows("estimate", model, flags, as_frame, timeout)


def plan(model, samples=None, epochs=None, batch=None, as_frame=False, timeout=None, **flags):
    """isched plan --json: one plan per batch size, each with its options
    (partition, node_type, wait_s, run_s, total_s, cost, ...), the plan
    without migration ("without"), with migration ("with": from, to,
    on_from_s, done_fraction, overhead_s, total_s, cost), "cheapest", and the
    recommendation ("recommend", "reason"). as_frame: the options, one row
    each, with the plan's batch."""
    flags = dict(samples=samples, epochs=epochs, batch=batch, **flags)
    plans = _rows("plan", model, flags, False, timeout)
    if not as_frame:
        return plans
    return _frame([dict(o, batch=p["batch"]) for p in plans for o in p["options"]])


def submit(command, model=None, timeout=None, **flags):
    """isched submit [flags] -- command...: an isched.Job (isched.runs) to
    follow, wait for, cancel and read; int(job) is the Slurm job id.

    command is the training command as a list, e.g. ["python3", "train.py",
    "--epochs", "10"]; it runs as given under isched-wrapper, no shell. With
    dry_run=True nothing is submitted and the batch script is returned.
    With array="0-3" (sbatch's --array) it is a list of Jobs, one per
    element, each a run of its own (lineage <lineage>_<task>; the command
    reads SLURM_ARRAY_TASK_ID). To run a Python function in a job, see
    isched.Executor.
    """
    if isinstance(command, (str, bytes)) or not command:
        raise TypeError("command: want a non-empty list of arguments such as ['python3', 'train.py'] "
                        "(it runs without a shell), got %r" % (command,))
    if callable(command):
        raise TypeError("command: a function goes through isched.Executor().submit(fn, *args), not isched.submit")
    if flags.get("dry_run"):
        with _model_file(model) as path:
            return run(["submit"] + flag_args(dict(model=path, **flags)) + ["--"] + [str(a) for a in command], timeout)
    from isched import runs  # noqa: PLC0415 - runs imports this module

    return runs.submit_job(command, model=model, timeout=timeout, **flags)


def status(job=None, as_frame=False, timeout=None):
    """isched status --json: the coordinator's record of job (a job id or a
    lineage: state, partition, step, total_iters, eta, history, ...), or with
    no job the records of your isched jobs (a list). Times are RFC 3339
    strings (parse_time reads them), durations seconds (docs/json.md)."""
    args = ["status", "--json"] + ([str(job)] if job is not None else [])
    out = _run_json(args, timeout)
    if not as_frame:
        return out
    return _frame(out if isinstance(out, list) else [out])


# Slurm's states of a job that is over (it may still be requeued and
# continued by isched when a coordinator follows it).
SLURM_ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                         "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT"})


def over(record):
    """Whether a status record says the run is over: the coordinator's
    record ENDED, or, for a job no coordinator has a record of ("source":
    "slurm"), Slurm's end."""
    if record.get("source") == "slurm":
        return record.get("state") in SLURM_ENDED
    return record.get("state") == "ENDED"


def follow(job, every=5.0, timeout=None):
    """Yield status(job) now and every `every` seconds until the run is
    over (over(); the last record yielded is the ended one), like isched
    status --watch."""
    import time  # noqa: PLC0415

    while True:
        st = status(job, timeout=timeout)
        yield st
        if over(st):
            return
        time.sleep(every)


def report(job, as_frame=False, plot=None, timeout=None):
    """isched report JOB --json: summary, attempts and samples of a run
    (snake_case keys, RFC 3339 times: parse_time; docs/json.md). plot= also writes the PNG/SVG plot.
    as_frame: the samples, one row each."""
    out = _run_json(["report", str(job), "--json"] + flag_args({"plot": plot}), timeout)
    return _frame(out["samples"]) if as_frame else out

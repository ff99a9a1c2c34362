"""Runs one call of a Python function in an isched job (isched.Executor).

    python3 .../isched/_call.py CALLDIR

CALLDIR (private to the user, made by Executor.submit) holds path.pkl (the
caller's sys.path) and call.pkl ((fn, args, kwargs), pickled with
cloudpickle). The result goes to CALLDIR/result.pkl, written under a
temporary name and renamed: ("ok", value) or ("error", exception,
traceback text). The exit status is 0 when the function returned, 1 when
it raised, 2 when the call could not be loaded. Standard library only (a
cloudpickle pickle imports cloudpickle when loaded).

An array's CALLDIR (Executor.map) holds the file "array" and, for each
element T, the directory CALLDIR/T with T's call.pkl: the element
SLURM_ARRAY_TASK_ID names runs that call and writes CALLDIR/T/result.pkl;
path.pkl is shared. Without a directory of its own the element loads
nothing (exit 2): never another element's call.
"""

import os
import pickle
import stat
import sys
import traceback


def private(path):
    """Refuse what another user owns or may write: loading its pickle would
    run their code as this job's user."""
    st = os.stat(path)
    if st.st_uid != os.getuid():
        raise PermissionError("%s belongs to uid %d, not to this job's (uid %d): not loaded" % (path, st.st_uid, os.getuid()))
    if st.st_mode & 0o022:
        raise PermissionError("%s may be written by other users (mode %o): not loaded" % (path, st.st_mode & 0o7777))


# The file that says CALLDIR holds an array's calls (isched.runs.ARRAY_MARKER).
ARRAY_MARKER = "array"


def taskdir(calldir, environ):
    """The directory of the call this job runs: calldir, or in an array's
    calldir the element's subdirectory (SLURM_ARRAY_TASK_ID). Raises
    (ValueError, FileNotFoundError, PermissionError) when there is none
    of the user's own."""
    private(calldir)
    marker = os.path.join(calldir, ARRAY_MARKER)
    if not os.path.lexists(marker):
        return calldir
    private(marker)
    task = environ.get("SLURM_ARRAY_TASK_ID", "")
    if not task.isdigit() or not task.isascii():
        raise ValueError("%s holds an array's calls: SLURM_ARRAY_TASK_ID=%r names no element" % (calldir, task))
    d = os.path.join(calldir, str(int(task)))
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        raise FileNotFoundError("%s holds no call of element %s (no directory %s)" % (calldir, task, d)) from None
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError("%s: not a directory (element %s's call): not loaded" % (d, task))
    return d


def load(calldir, task_dir):
    """The call (fn, args, kwargs) in task_dir, with the caller's sys.path
    (calldir's) added."""
    for p in (calldir, os.path.join(calldir, "path.pkl"), task_dir, os.path.join(task_dir, "call.pkl")):
        private(p)
    # This file's directory (the isched package) is sys.path[0]: it would
    # shadow the user's modules by the package's (lightning, hf): the
    # working directory instead, as for `python -c`.
    sys.path[0] = ""
    with open(os.path.join(calldir, "path.pkl"), "rb") as f:
        caller = pickle.load(f)
    sys.path.extend(p for p in caller if isinstance(p, str) and p not in sys.path)
    with open(os.path.join(task_dir, "call.pkl"), "rb") as f:
        return pickle.load(f)


def dumps(outcome):
    try:
        import cloudpickle  # noqa: PLC0415 - a value of a class defined in __main__
        return cloudpickle.dumps(outcome)
    except ImportError:
        return pickle.dumps(outcome)


def write(calldir, outcome):
    """Write the outcome atomically; a value or exception that cannot be
    pickled becomes an error saying so."""
    try:
        data = dumps(outcome)
    except Exception as e:  # noqa: BLE001 - whatever pickling raises
        what = "return value" if outcome[0] == "ok" else "exception %r" % (outcome[1],)
        err = RuntimeError("the function's %s cannot be pickled: %s: %s" % (what, type(e).__name__, e))
        tb = outcome[2] if outcome[0] == "error" else ""
        data = pickle.dumps(("error", err, tb))
    tmp = os.path.join(calldir, ".result.pkl.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(calldir, "result.pkl"))


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: _call.py CALLDIR (run by isched.Executor)\n")
        return 2
    calldir = os.path.abspath(argv[1])
    try:
        task_dir = taskdir(calldir, os.environ)
        fn, args, kwargs = load(calldir, task_dir)
    except Exception as e:  # noqa: BLE001 - any failure to load is the job's end
        sys.stderr.write("isched: cannot load the call in %s: %s: %s\n" % (calldir, type(e).__name__, e))
        return 2
    try:
        outcome = ("ok", fn(*args, **kwargs))
        code = 0
    except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt are the function's outcome too
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        outcome = ("error", e, tb)
        code = 1
    sys.stdout.flush()
    write(task_dir, outcome)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Runs one call of a Python function in an isched job (isched.Executor).

    python3 .../isched/_call.py CALLDIR

CALLDIR (private to the user, made by Executor.submit) holds path.pkl (the
caller's sys.path) and call.pkl ((fn, args, kwargs), pickled with
cloudpickle). The result goes to CALLDIR/result.pkl, written under a
temporary name and renamed: ("ok", value) or ("error", exception,
traceback text). The exit status is 0 when the function returned, 1 when
it raised, 2 when the call could not be loaded. Standard library only (a
cloudpickle pickle imports cloudpickle when loaded).
"""

import os
import pickle
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


def load(calldir):
    """The call (fn, args, kwargs), with the caller's sys.path added."""
    for p in (calldir, os.path.join(calldir, "path.pkl"), os.path.join(calldir, "call.pkl")):
        private(p)
    # This file's directory (the isched package) is sys.path[0]: it would
    # shadow the user's modules by the package's (lightning, hf): the
    # working directory instead, as for `python -c`.
    sys.path[0] = ""
    with open(os.path.join(calldir, "path.pkl"), "rb") as f:
        caller = pickle.load(f)
    sys.path.extend(p for p in caller if isinstance(p, str) and p not in sys.path)
    with open(os.path.join(calldir, "call.pkl"), "rb") as f:
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
        fn, args, kwargs = load(calldir)
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
    write(calldir, outcome)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""What one attempt of a convention test's training script did, for the Go
test to read: written atomically to <facts>.<SLURM_RESTART_COUNT>."""

import json
import os
import sys
import time


def new(facts_path, **fields):
    """The facts of this attempt: its restart, job, first/last step, last
    save and how it ended, plus the script's own fields."""
    facts = {"restart": os.environ.get("SLURM_RESTART_COUNT", "0"), "job": os.environ.get("SLURM_JOB_ID", ""),
             "start": 0, "end": 0, "saved": 0, "how": "", "t0": time.time()}
    facts.update(fields)
    facts["_path"] = "%s.%s" % (facts_path, facts["restart"])
    return facts


def write(facts):
    path = facts["_path"]
    with open(path + ".tmp", "w") as f:
        json.dump({k: v for k, v in facts.items() if k != "_path"}, f)
    os.replace(path + ".tmp", path)


def record(facts, how, code):
    """Write the facts with how the attempt ended, and exit with code at once."""
    facts["how"], facts["t1"] = how, time.time()
    write(facts)
    sys.stdout.flush()
    os._exit(code)

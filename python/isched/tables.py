"""The use case's tables from what isched estimate and plan print (--json).

    est = isched.estimate(model, samples=50000, epochs=10, batch=[8, 16, 32, 64])
    plans = isched.plan(model, samples=50000, epochs=10, batch=[8, 16, 32, 64])
    print(isched.format_table(isched.table2(est, plans)))

table2 joins the two: every option of a plan (a partition where the run
fits, with its node type) with its estimate row (memory, fits, hours) and
whether the partition is idle now. No figure is computed here; hours are
converted from the plan's seconds and bytes to GiB, nothing else.
"""

__all__ = ["table2", "migration_plans", "format_table", "TABLE2_COLUMNS"]

GIB = float(1 << 30)

TABLE2_COLUMNS = ("batch", "node_type", "partition", "memory_gib", "limit_gib", "fits", "hours",
                  "idle", "wait_h", "total_h", "cost", "source", "wait_basis")


def _hours(seconds):
    return None if seconds is None else seconds / 3600.0


def _estimate_index(estimates):
    return {(r["batch"], r["node_type"]): r for r in estimates}


def _idle(row, partition):
    """True/False as the estimate says, None when cluster state was unknown."""
    for p in row.get("partitions", []):
        if p["name"] == partition:
            return p.get("idle_now")
    return None


def table2(estimates, plans):
    """Rows (dicts, TABLE2_COLUMNS) per batch size x feasible partition, in the
    plans' order: memory_gib (peak, the estimate's memory_kind), limit_gib,
    fits, hours (the run there, from the plan), idle (None: unknown), wait_h and
    total_h (None when the wait is unknown: no cluster state), cost.

    estimates and plans are isched.estimate's and isched.plan's rows for the
    same model, batches and flags; a plan option without its estimate row is
    an error (they were run with different arguments).
    """
    index = _estimate_index(estimates)
    rows = []
    for p in plans:
        for o in p["options"]:
            e = index.get((p["batch"], o["node_type"]))
            if e is None:
                raise ValueError("the estimates have no row for batch %d on %s: run estimate and plan with the "
                                 "same model, batches and site" % (p["batch"], o["node_type"]))
            known = o.get("wait_known", False)
            rows.append({
                "batch": p["batch"],
                "node_type": o["node_type"],
                "partition": o["partition"],
                "memory_gib": e["memory_bytes"] / GIB,
                "limit_gib": e["limit_bytes"] / GIB,
                "fits": e["fits"],
                "hours": _hours(o["run_s"]),
                "idle": _idle(e, o["partition"]),
                "wait_h": _hours(o["wait_s"]) if known else None,
                "total_h": _hours(o["total_s"]) if known else None,
                "cost": o["cost"],
                "source": e["source"],
                "wait_basis": o.get("wait_basis", ""),
            })
    return rows


def _option(p, name):
    """The option a plan names ("gpu", or "scavenger/lab-gpu" where the
    partition has several node types)."""
    for o in p["options"]:
        if name in (o["partition"], o["partition"] + "/" + o["node_type"]):
            return o
    return None


def _plan_row(p, kind):
    if kind == "with":
        m = p.get("with")
        if not m:
            return None
        where, total, cost = "%s -> %s" % (m["from"], m["to"]), _hours(m["total_s"]), m["cost"]
    else:
        o = _option(p, p.get(kind) or "")
        if o is None:
            return None
        where, cost = p[kind], o["cost"]
        total = _hours(o["total_s"]) if o.get("wait_known", False) else None
    return {"batch": p["batch"], "plan": kind, "where": where, "total_h": total, "cost": cost,
            "recommended": p.get("recommend") == kind, "reason": p.get("reason", "")}


def migration_plans(plans):
    """One row per batch size and plan: "without" migration (wait for the
    chosen partition), "with" migration (start now, move when it frees) and
    "cheapest", each with where, total_h (None: wait unknown), cost, and
    recommended (the plan isched recommends; its reason is on every row). A
    plan the CLI did not make (no migration plan without cluster state) has
    no row."""
    rows = []
    for p in plans:
        for kind in ("without", "with", "cheapest"):
            row = _plan_row(p, kind)
            if row is not None:
                rows.append(row)
    return rows


def _cell(v):
    if v is None:
        return "?"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "%.2f" % v
    return str(v)


def format_table(rows, columns=None):
    """rows as a plain-text table (None shows as ?, floats with 2 decimals)."""
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())
    cells = [[c.upper() for c in columns]] + [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in cells)

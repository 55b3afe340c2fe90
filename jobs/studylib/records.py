"""Run records of finished points: reading and checking them, and the per-unit
times, time split and peak memory a study reports.
(jobs/study.py, docs/studies.md)"""

import json

# --------------------------------------------------------------------------------------------
# Records


def read_record(path):
    try:
        with open(path) as f:
            j = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(j, dict) or "command" not in j:
        return None
    return j


def valid_record(path):
    j = read_record(path)
    return j is not None and seconds_per_unit(j)[0] is not None


def _mean(rows, key):
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return sum(vals) / len(vals) if vals else None


def seconds_per_unit(j):
    """(seconds, unit) of a record: the versioned envelope's timing, else the older fields."""
    t = j.get("timing")
    if isinstance(t, dict) and isinstance(t.get("seconds_per_unit"), (int, float)):
        return float(t["seconds_per_unit"]), t.get("unit", "?")
    if isinstance(j.get("seconds_per_iteration"), (int, float)):
        return float(j["seconds_per_iteration"]), "iteration"
    if isinstance(j.get("mean_seconds_per_mode"), (int, float)):
        return float(j["mean_seconds_per_mode"]), "mode"
    its = j.get("per_iteration")
    if isinstance(its, list) and its:
        rows = its[1:] if len(its) > 1 else its  # the first iteration warms caches
        m = _mean(rows, "seconds")
        if m is not None:
            return m, "iteration"
    ph = j.get("phases_seconds")
    if isinstance(ph, dict) and isinstance(ph.get("total"), (int, float)):
        return float(ph["total"]), "run"
    return None, None


def split_seconds(j, total):
    """Seconds per unit in kernel/comm/solve/io/other (those the record has)."""
    t = j.get("timing")
    if isinstance(t, dict) and isinstance(t.get("split"), dict):
        return {k: float(v) for k, v in t["split"].items() if isinstance(v, (int, float))}
    if isinstance(j.get("share"), dict) and total:
        sh = j["share"]
        m = {"kernel": sh.get("kernel", sh.get("ttmc")), "comm": sh.get("comm"),
             "solve": sh.get("solve", sh.get("svd"))}
        return {k: v * total for k, v in m.items() if isinstance(v, (int, float))}
    its = j.get("per_iteration")
    if isinstance(its, list) and its:
        rows = its[1:] if len(its) > 1 else its
        m = {"kernel": _mean(rows, "kernel") or _mean(rows, "ttmc"), "comm": _mean(rows, "comm"),
             "solve": _mean(rows, "solve") or _mean(rows, "svd")}
        out = {k: v for k, v in m.items() if v is not None}
        if total and out:
            out["other"] = max(0.0, total - sum(out.values()))
        return out
    ph = j.get("phases_seconds")
    if isinstance(ph, dict) and "multiply" in ph:  # contract
        g = lambda *ks: sum(float(ph.get(k, 0) or 0) for k in ks)
        out = {"kernel": g("multiply"), "comm": g("route_inputs", "route_output"),
               "io": g("read", "write"), "other": g("plan", "merge")}
        if total:
            out["other"] += max(0.0, total - sum(out.values()))
        return out
    return {}


def comm_parts(j, split):
    """(transfer, wait, source) seconds per unit of the split's comm, or None where the record
    cannot tell moving data from waiting for a slower rank.

    A blocking collective's time on rank 0 includes the wait for the ranks that reach it
    later. Two records say how long that is:
    - `comm_floor` (bench cp, bench tucker on NCCL): the least comm over the ranks is the
      slowest rank's, which waits least; rank 0's comm beyond it is waiting.
    - `kernel_per_rank` (cp, bench cp): the slowest rank's MTTKRP seconds per iteration; rank 0
      waits for that rank about the slowest MTTKRP time less its own (the split's kernel)."""
    comm = split.get("comm")
    if not isinstance(comm, (int, float)):
        return None
    cf = j.get("comm_floor")
    if isinstance(cf, dict) and isinstance(cf.get("comm_seconds_min_over_ranks"), (int, float)):
        transfer = min(comm, max(0.0, float(cf["comm_seconds_min_over_ranks"])))
        return transfer, comm - transfer, "comm_floor"
    kp = j.get("kernel_per_rank")
    kernel = split.get("kernel")
    if (isinstance(kp, dict) and isinstance(kp.get("max_seconds_per_iteration"), (int, float))
            and isinstance(kernel, (int, float))):
        wait = min(comm, max(0.0, float(kp["max_seconds_per_iteration"]) - kernel))
        return comm - wait, wait, "kernel_per_rank"
    return None


def comm_floor_seconds(j):
    """The record's NCCL floor of its comm per unit (bench cp, bench tucker on NCCL: `comm_floor`,
    the collectives of the same bytes timed on the node), or None."""
    cf = j.get("comm_floor")
    if isinstance(cf, dict) and isinstance(cf.get("seconds_per_iteration"), (int, float)):
        return float(cf["seconds_per_iteration"])
    return None


def peak_bytes(j, key):
    m = j.get("memory")
    v = m.get(key) if isinstance(m, dict) else None
    if v is None and key == "peak_host_bytes_per_rank":
        v = j.get("peak_memory_bytes_per_rank")
    if isinstance(v, list):
        v = max((x for x in v if isinstance(x, (int, float))), default=None)
    return float(v) if isinstance(v, (int, float)) else None

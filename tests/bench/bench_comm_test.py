#!/usr/bin/env python3
"""`tessera bench comm --backend cpu` under mpiexec -n NP (argument): the host path (MPI's
blocking calls on host buffers) runs, prints one row per collective and size, and writes a
run record that matches docs/run-record.schema.json and holds the same rows with nccl-tests'
bus-bandwidth factors. Bad --op and --bytes values and options of the other benchmarks are
refused in one line. The GPU path (NCCL, stream-ordered) is run by jobs/, not here.

Environment: TESSERA_BIN, TESSERA_MPIEXEC, TESSERA_SOURCE_DIR. Exit 77 (ctest
SKIP_RETURN_CODE) when python3-jsonschema is missing.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import jsonschema
except ImportError:
    print("SKIP: python3-jsonschema is not installed (jobs/setup.sh --packages installs it)")
    sys.exit(77)

BIN = os.environ["TESSERA_BIN"]
MPIEXEC = os.environ.get("TESSERA_MPIEXEC", "mpiexec")
SRC = os.environ.get("TESSERA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def run(args, cwd, np):
    """The command under mpiexec -n np (np None: the binary alone, one rank)."""
    cmd = ([MPIEXEC, "-n", str(np), "--oversubscribe"] if np else []) + [BIN] + args
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=120)
    return p.returncode, p.stdout


def main():
    np = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    with open(os.path.join(SRC, "docs", "run-record.schema.json")) as f:
        schema = json.load(f)
    validator = jsonschema.validators.validator_for(schema)(schema)
    ops = ["allreduce", "reduce_scatter", "allgather"]
    with tempfile.TemporaryDirectory(prefix="tessera_bench_comm_") as d:
        # 8 B .. 64 KiB doubling: 14 sizes; a float reduce_scatter of 8 bytes on 2 ranks is
        # one element per rank, so the smallest sizes of each op may fold into one row.
        rc, out = run(["bench", "comm", "--backend", "cpu", "--precision", "float", "--bytes",
                       "8:64K", "--warmup", "1", "--repeat", "3", "--json",
                       "comm.json"], d, np)
        print(out)
        check(rc == 0, "bench comm exit status %d" % rc)
        if rc != 0:
            return 1
        with open(os.path.join(d, "comm.json")) as f:
            rec = json.load(f)
        for e in sorted(validator.iter_errors(rec), key=lambda e: list(e.path)):
            check(False, "record: %s at /%s" % (e.message, "/".join(str(p) for p in e.path)))
        check(rec["command"] == "bench comm", "command %r" % rec["command"])
        check(rec["machine"]["ranks"] == np and rec["machine"]["backend"] == "cpu",
              "machine %r" % rec["machine"])
        c = rec["comm"]
        check(c["communicator"] == "mpi" and not c["stream_ordered"] and c["batch"] == 1 and
              c["ranks"] == np and c["repeat"] == 3 and c["warmup"] == 1, "comm %r" % c)
        check(("note" in c) == (np == 1), "the one-rank note only at one rank: %r" % c)
        o = rec["options"]
        check(o.get("bytes") == "8:64K" and o.get("op") == ",".join(ops) and
              o.get("batch") == 20, "options %r" % o)
        rows = rec["rows"]
        for op in ops:
            mine = [r for r in rows if r["op"] == op]
            check(len(mine) >= 12, "%s: %d rows, expected one per size (14, the smallest may "
                  "fold)" % (op, len(mine)))
            check(mine and mine[-1]["bytes"] == 65536, "%s: the largest size is 64 KiB" % op)
            check(all(a["bytes"] < b["bytes"] for a, b in zip(mine, mine[1:])),
                  "%s: sizes increase" % op)
            factor = (2.0 if op == "allreduce" else 1.0) * (np - 1) / np
            for r in mine:
                check(abs(r["bus_factor"] - factor) < 1e-12, "%s: bus factor %r" % (op, r))
                check(r["bytes"] == r["elements"] * 4, "%s: bytes = elements x 4" % op)
                if op != "allreduce":
                    check(r["elements"] % np == 0, "%s: whole blocks per rank %r" % (op, r))
                check(r["slowest_seconds"] >= r["seconds"] * (1 - 1e-9),
                      "%s: slowest >= mean %r" % (op, r))
                if r["seconds"] > 0:
                    check(abs(r["algbw_bytes_per_s"] - r["bytes"] / r["seconds"]) <=
                          1e-9 * r["algbw_bytes_per_s"], "%s: algbw = bytes / time" % op)
                check(abs(r["busbw_bytes_per_s"] - factor * r["algbw_bytes_per_s"]) <=
                      1e-9 * r["algbw_bytes_per_s"], "%s: busbw = algbw x factor" % op)
                check(r["in_place"] == (op == "allreduce"), "%s: in_place" % op)
            # The printed table: one line per row, beginning with the op's name.
            printed = [l for l in out.splitlines() if l.startswith(op + " ")]
            check(len(printed) == len(mine), "%s: %d printed rows, %d in the record" %
                  (op, len(printed), len(mine)))
        check([s["op"] for s in rec["summary"]] == ops, "summary %r" % rec["summary"])
        if np == 1:
            check(all(r["busbw_bytes_per_s"] == 0 for r in rows), "one rank: bus bandwidth 0")
            check("1 rank: nothing moves between ranks" in out, "one rank: said so")
        else:
            check(all(r["busbw_bytes_per_s"] > 0 for r in rows), "bus bandwidth > 0")
        # A subset of the collectives and a list of sizes.
        rc, out = run(["bench", "comm", "--backend", "cpu", "--op", "allgather", "--bytes",
                       "1K,4K", "--repeat", "1", "--json", "ag.json"], d, np)
        check(rc == 0, "bench comm --op allgather exit status %d: %s" % (rc, out))
        if rc == 0:
            with open(os.path.join(d, "ag.json")) as f:
                ag = json.load(f)
            check([(r["op"], r["bytes"]) for r in ag["rows"]] ==
                  [("allgather", 1024.0), ("allgather", 4096.0)], "allgather rows %r" % ag["rows"])
        # Refused in one line each, before any work (once, by the one-rank test).
        for args, text in ((["--op", "broadcast"], "unknown collective 'broadcast'"),
                           (["--bytes", "1M:1K"], "MIN <= MAX"),
                           (["--bytes", "12Q"], "expected a size"),
                           (["--rank", "4"], "not of bench comm")):
            if np != 1:
                break
            rc, out = run(["bench", "comm", "--backend", "cpu"] + args, d, None)
            check(rc != 0 and text in out, "%s refused with %r: exit %d, %r" %
                  (" ".join(args), text, rc, out))
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("bench comm at %d rank(s): record and rows checked" % np)
    return 0


if __name__ == "__main__":
    sys.exit(main())

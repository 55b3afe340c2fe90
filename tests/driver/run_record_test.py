#!/usr/bin/env python3
"""Every subcommand's --json run record checked against docs/run-record.schema.json.

Runs each subcommand that writes a record (cp, tucker, contract and its dry run, generate,
convert, partition, plan, info on a tensor, a store and CP/Tucker models, export,
bench mttkrp|cp|ttmc|tucker|contract) on a tiny generated tensor, validates each record with the JSON Schema file (python3-jsonschema), and checks
what the schema cannot: the options carry their defaults, the per-rank lists have one entry
per rank (a 2-rank run), the Slurm fields come from SLURM_* variables, the timing split adds
up, info and export describe what they found and wrote, and a --json that is the input is
refused. Exit 77 (ctest SKIP_RETURN_CODE) with a message when jsonschema is missing.

Environment: TESSERA_BIN (the tessera binary), TESSERA_MPIEXEC (mpiexec), TESSERA_SOURCE_DIR.
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
SCHEMA_PATH = os.path.join(SRC, "docs", "run-record.schema.json")

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def run(args, cwd, env=None, np=None):
    cmd = ([MPIEXEC, "-n", str(np), "--oversubscribe"] if np else []) + [BIN] + args + ["-q"]
    e = dict(os.environ)
    # A real Slurm job around the test must not leak into the records checked below.
    for k in list(e):
        if k.startswith("SLURM_"):
            del e[k]
    e.update(env or {})
    p = subprocess.run(cmd, cwd=cwd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=120)
    if p.returncode != 0:
        print(p.stdout)
        raise SystemExit("command failed (%d): %s" % (p.returncode, " ".join(cmd)))
    return p.stdout


def run_refused(args, cwd):
    """The command fails (exit status 1) with an error line; returns its output."""
    cmd = [BIN] + args + ["-q"]
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=120)
    check(p.returncode == 1, "%s: exit status %d, expected 1" % (" ".join(args), p.returncode))
    return p.stdout


def command_of(name):
    """The record's command for a case name (cp_np2 -> cp, bench_mttkrp -> bench mttkrp)."""
    for prefix in ("info", "export"):
        if name.startswith(prefix):
            return prefix
    return name.replace("_np2", "").replace("_dry", "").replace("_gather", "").replace("_", " ")


def main():
    with open(SCHEMA_PATH) as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator = cls(schema)

    with tempfile.TemporaryDirectory(prefix="tessera_run_record_") as d:
        run(["generate", "--dims", "12x10x8", "--nnz", "300", "-o", "x.tns", "--json",
             "generate.json"], d)
        slurm = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "1",
                 "SLURM_JOB_NODELIST": "node[01-02]", "SLURM_CPUS_PER_TASK": "2",
                 "SLURM_RESTART_COUNT": "1"}
        cases = {
            "generate": None,  # written above
            "convert": (["convert", "x.tns", "x.h5", "--json", "convert.json"], {}, None),
            "partition": (["partition", "x.h5", "--grid", "2x1x1", "-o", "xp.h5", "--json",
                           "partition.json"], {}, None),
            "cp": (["cp", "x.tns", "-r", "2", "-i", "2", "--out", "cp_model.h5", "--json",
                    "cp.json"], slurm, None),
            "cp_np2": (["cp", "x.tns", "-r", "2", "-i", "2", "-t", "1", "--json",
                        "cp_np2.json"], {}, 2),
            "tucker": (["tucker", "x.tns", "-r", "2,2,2", "-i", "2", "--out", "tk_model.h5",
                        "--json", "tucker.json"], {}, None),
            "contract": (["contract", "x.tns", "x.tns", "--einsum", "ijk,ijl->kl", "--json",
                          "contract.json"], {}, None),
            "contract_dry": (["contract", "x.tns", "x.tns", "--einsum", "ijk,ijl->kl",
                              "--dry-run", "--json", "contract_dry.json"], {}, None),
            "plan": (["plan", "x.tns", "--json", "plan.json"], {}, None),
            "info_tensor": (["info", "x.tns", "--json", "info_tensor.json"], {}, None),
            "info_store": (["info", "xp.h5", "--verify", "--stats", "--json",
                            "info_store.json"], {}, None),
            "info_cp": (["info", "cp_model.h5", "--json", "info_cp.json"], {}, None),
            "info_tucker": (["info", "tk_model.h5", "--json", "info_tucker.json"], {}, None),
            "export": (["export", "cp_model.h5", "--out-dir", "exp", "--json", "export.json"],
                       {}, None),
            "export_tucker": (["export", "tk_model.h5", "--format", "txt", "--prefix", "tk_",
                               "--json", "export_tucker.json"], {}, None),
            "bench_mttkrp": (["bench", "mttkrp", "x.tns", "-r", "2", "--repeat", "1", "--json",
                              "bench_mttkrp.json"], {}, None),
            # 16-bit gathers (a no-op on the cpu backend): the errors, and the host's double
            # recomputation of sampled rows of the generated tensor (float's rounding only).
            "bench_mttkrp_gather": (["bench", "mttkrp", "--generate", "30x20x10", "--nnz", "3000",
                                     "--precision", "float", "-r", "4", "--repeat", "1",
                                     "--gather-precision", "fp16", "--bandwidth", "8G", "--json",
                                     "bench_mttkrp_gather.json"], {}, None),
            # --bandwidth: the floors' copy bandwidth given, not measured (bench_mttkrp measures).
            "bench_cp": (["bench", "cp", "x.tns", "-r", "2", "--iters", "2", "--bandwidth", "8G",
                          "--json", "bench_cp.json"], {}, None),
            "bench_ttmc": (["bench", "ttmc", "x.tns", "--ranks", "2,2,2", "--repeat", "1",
                            "--bandwidth", "8G", "--json", "bench_ttmc.json"], {}, None),
            "bench_tucker": (["bench", "tucker", "x.tns", "--ranks", "2,2,2", "--iters", "2",
                              "--bandwidth", "8G", "--json", "bench_tucker.json"], {}, None),
            "bench_contract": (["bench", "contract", "x.tns", "x.tns", "--einsum", "ijk,ijl->kl",
                                "--repeat", "1", "--no-reference", "--json",
                                "bench_contract.json"], {}, None),
        }
        records = {}
        for name, c in cases.items():
            if c is not None:
                run(c[0], d, c[1], c[2])
            with open(os.path.join(d, name + ".json")) as f:
                records[name] = json.load(f)

        expected_unit = {"generate": "run", "convert": "run", "partition": "run", "cp": "iteration",
                         "cp_np2": "iteration", "tucker": "iteration", "contract": "contraction",
                         "contract_dry": "run", "plan": "run", "bench_mttkrp": "mode",
                         "bench_mttkrp_gather": "mode",
                         "bench_cp": "iteration", "bench_ttmc": "mode",
                         "bench_tucker": "iteration", "bench_contract": "contraction",
                         "info_tensor": "run", "info_store": "run", "info_cp": "run",
                         "info_tucker": "run", "export": "run", "export_tucker": "run"}
        for name, rec in records.items():
            errors = sorted(validator.iter_errors(rec), key=lambda e: list(e.path))
            for e in errors:
                check(False, "%s: %s at /%s" % (name, e.message,
                                                "/".join(str(p) for p in e.path)))
            check(rec["command"] == command_of(name), "%s: command is %r" % (name, rec.get("command")))
            check(rec["argv"][1:3] == rec["command"].split()[:2] or
                  rec["argv"][1] == rec["command"].split()[0],
                  "%s: argv %r does not start with the command" % (name, rec["argv"]))
            t = rec["timing"]
            check(t["unit"] == expected_unit[name], "%s: timing unit %r" % (name, t["unit"]))
            parts = sum(v for k, v in t["split"].items() if k != "other")
            total = t["seconds_per_unit"]
            # One rank: the phases are timed inside the unit's own timer, so they cannot
            # exceed it (on several ranks a phase may be another rank's).
            check(name.endswith("_np2") or parts <= total * (1 + 1e-6) + 1e-9,
                  "%s: the split's parts (%g s) exceed seconds_per_unit (%g s)" % (name, parts, total))
            check(abs(parts + t["split"]["other"] - total) <= 1e-9 + 1e-6 * total,
                  "%s: split does not add up to seconds_per_unit" % name)
            check(len(rec["memory"]["peak_host_bytes_per_rank"]) == rec["machine"]["ranks"],
                  "%s: one host peak per rank" % name)
            check(all(v > 0 for v in rec["memory"]["peak_host_bytes_per_rank"]),
                  "%s: host peaks are measured" % name)

        # Options: every option of the subcommand with its default, the record's own kept.
        cp = records["cp"]["options"]
        check(cp.get("read_ahead") == 2 and cp.get("tier") == "auto" and cp.get("tol") == 1e-5,
              "cp: defaults of options not given are in the record: %r" % cp)
        check(cp.get("rank") == 2 and cp.get("iters") == 2, "cp: given options are in the record")
        check(records["generate"]["options"].get("noise") == 0, "generate: --noise default")
        check(records["bench_mttkrp"]["options"].get("repeat") == 1, "bench mttkrp: --repeat")
        check(records["bench_mttkrp"]["machine"].get("bandwidth_source") == "measured" and
              all(records[n]["machine"].get("bandwidth_source") == "given" and
                  records[n]["machine"].get("bandwidth_bytes_per_s") == 8 * 2**30
                  for n in ("bench_cp", "bench_ttmc", "bench_tucker", "bench_mttkrp_gather")),
              "bench: the copy bandwidth measured, or given by --bandwidth")
        g = records["bench_mttkrp_gather"]
        check(g.get("gather_precision") == "fp16" and len(g.get("gather_relative_error", [])) == 3
              and len(g.get("float_relative_error_fp64", [])) == 3 and
              all(0 <= e < 1e-5 for e in g["float_relative_error_fp64"] +
                  g["gather_relative_error_fp64"]),
              "bench mttkrp --gather-precision: errors per mode, float against double < 1e-5: %r"
              % {k: g.get(k) for k in ("gather_relative_error", "float_relative_error_fp64")})
        # bench tucker's floor is its N TTMcs: on the same file and ranks, the bytes of bench
        # ttmc's modes (the prepared handle's stream, not the COO block's).
        tk_bytes = records["bench_tucker"]["bytes_per_iteration"]
        tt_bytes = sum(m["bytes"] for m in records["bench_ttmc"]["modes"])
        check(abs(tk_bytes - tt_bytes) <= 1e-9 * tt_bytes,
              "bench tucker: floor bytes %r, bench ttmc's modes sum to %r" % (tk_bytes, tt_bytes))
        # bench cp|tucker: the median iteration beside the mean (both after the first).
        for name in ("bench_cp", "bench_tucker"):
            r = records[name]
            check(0 < r.get("median_seconds_per_iteration", 0) <= 1e3 and
                  r["seconds_per_iteration"] > 0,
                  "%s: median_seconds_per_iteration: %r" % (name, r.get("median_seconds_per_iteration")))
        # Two ranks: per-rank lists and the host names gathered.
        np2 = records["cp_np2"]
        check(np2["machine"]["ranks"] == 2, "cp_np2: ranks")
        check(len(np2["memory"]["peak_host_bytes_per_rank"]) == 2, "cp_np2: two host peaks")
        check(np2["machine"]["nodes"] == len(np2["machine"]["hosts"]) == 1, "cp_np2: one node")
        check(np2["machine"]["slurm"] is None, "cp_np2: not under Slurm")
        # Slurm fields from the environment.
        s = records["cp"]["machine"]["slurm"]
        check(s is not None and s["job_id"] == "4242" and s["step_id"] == "0" and
              s["ntasks"] == 1 and s["cpus_per_task"] == 2 and s["restart_count"] == 1 and
              s["nodelist"] == "node[01-02]" and s["array_job_id"] is None,
              "cp: slurm object from SLURM_* variables: %r" % s)
        # The phases a study reads.
        for name in ("cp", "tucker"):
            ph = records[name]["phases_seconds"]
            its = records[name]["timing"]["seconds_per_unit"] * records[name]["iterations"]
            check(abs(ph["iterations"] - its) <= 1e-9 + 1e-6 * its,
                  "%s: phases_seconds.iterations is the sum of the iterations" % name)
            check(ph["total"] >= ph["iterations"], "%s: total >= iterations" % name)

        # info: what it found, against what generate wrote and cp/tucker computed.
        gen = records["generate"]["tensor"]
        it = records["info_tensor"]
        check(it["kind"] == "tensor" and it["file"] == "x.tns", "info_tensor: kind and file")
        check(it["tensor"] == {"order": 3, "dims": [12, 10, 8], "nnz": gen["nnz"]},
              "info_tensor: tensor %r, generate wrote %r" % (it["tensor"], gen))
        check(it["stats"]["nnz"] == gen["nnz"] and len(it["stats"]["modes"]) == 3 and
              [m["dim"] for m in it["stats"]["modes"]] == [12, 10, 8] and
              it["stats"]["norm"] > 0, "info_tensor: stats %r" % it.get("stats"))
        st = records["info_store"]
        check(st["kind"] == "store" and st["tensor"] == it["tensor"], "info_store: tensor")
        check(st["store"]["partition"] is not None and st["store"]["partition"]["grid"] ==
              [2, 1, 1] and sum(st["store"]["partition"]["block_nnz"]) == gen["nnz"],
              "info_store: partition %r" % st["store"].get("partition"))
        check(st.get("verified", {}).get("nnz") == gen["nnz"], "info_store: --verify recorded")
        check(abs(st["stats"]["norm"] - it["stats"]["norm"]) <= 1e-12 * it["stats"]["norm"],
              "info_store: --stats gives the text file's norm")
        m = records["info_cp"]["model"]
        check(records["info_cp"]["kind"] == "model" and m["kind"] == "cp" and m["rank"] == 2 and
              m["dims"] == [12, 10, 8] and m["iterations"] == records["cp"]["iterations"] and
              abs(m["fit"] - records["cp"]["fit"]) <= 1e-12, "info_cp: model %r" % m)
        m = records["info_tucker"]["model"]
        check(m["kind"] == "tucker" and m["ranks"] == [2, 2, 2] and m["order"] == 3 and
              m["iterations"] == records["tucker"]["iterations"] and
              abs(m["fit"] - records["tucker"]["fit"]) <= 1e-12, "info_tucker: model %r" % m)
        # export: the files it wrote, with their shapes and sizes.
        for name, shapes, fmt in (("export", [[12, 2], [10, 2], [8, 2], [2]], "npy"),
                                  ("export_tucker", [[12, 2], [10, 2], [8, 2], [2, 2, 2]],
                                   "txt")):
            ex = records[name]
            check(ex["format"] == fmt and [f["shape"] for f in ex["files"]] == shapes,
                  "%s: format and shapes %r" % (name, ex["files"]))
            for f in ex["files"]:
                p = os.path.join(d, f["path"])
                check(os.path.isfile(p) and os.path.getsize(p) == f["bytes"],
                      "%s: %s written with %d bytes" % (name, f["path"], f["bytes"]))
        check([f["name"] for f in records["export"]["files"]] ==
              ["mode1", "mode2", "mode3", "lambda"], "export: CP file names")
        check(records["export_tucker"]["files"][3]["path"] == "tk_core.txt",
              "export_tucker: --prefix names the files")
        # A --json that is the input (the tensor, the model) is refused; nothing is written.
        before = os.path.getsize(os.path.join(d, "x.tns"))
        out = run_refused(["info", "x.tns", "--json", "x.tns"], d)
        check("same file as the input" in out and
              os.path.getsize(os.path.join(d, "x.tns")) == before,
              "info --json x.tns refused: %r" % out)
        out = run_refused(["export", "cp_model.h5", "--out-dir", "exp2", "--json",
                           "cp_model.h5"], d)
        check("same file as the model" in out and not os.path.exists(os.path.join(d, "exp2")),
              "export --json MODEL refused before any export: %r" % out)

    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all %d run records match docs/run-record.schema.json" % len(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The run record of one run is the same from the CLI (--json) and from Python (.record):
both front ends are adapters over one run layer (src/engine/run, docs/architecture.md).
Keys that are inherently different between two processes are ignored, and listed here."""

import json
import os
import subprocess

from conftest import random_sparse, write_tns

import tessera

# Top-level keys that differ between any two runs or processes:
IGNORED = {
    "argv",  # the command line: the tessera binary vs python3
    "interface",  # "python" from the module; absent from the CLI
    "timestamp",  # when each process started
    "written_by",  # the file marker io::kRecordKey, added when a record is written to a file
    "memory",  # measured peaks (VmHWM) of two different processes
    "peak_memory_bytes_per_rank",  # the same, max over ranks
    "memory_plan",  # measured limits (MemAvailable, disk, process baseline) at that moment
    "throughput",  # nonzeros/s and bytes/s: timings
    "timing",  # seconds per iteration and its split
    "phases_seconds",  # seconds per phase
    "kernel_per_rank",  # MTTKRP seconds per iteration on the slowest and the mean rank
    "ttmc_per_rank",  # TTMc seconds per iteration on the slowest and the mean rank
    "comm_split",  # Tucker: seconds of comm per iteration by kind
    "kernel_seconds_max_over_ranks",  # contract: seconds of the kernel's steps
}
# Keys of every per_iteration entry that are timings:
IGNORED_PER_ITERATION = {"seconds", "kernel", "comm", "solve", "ttmc", "svd"}


def comparable(rec):
    out = {k: v for k, v in rec.items() if k not in IGNORED}
    out["per_iteration"] = [{k: v for k, v in it.items() if k not in IGNORED_PER_ITERATION}
                            for it in rec.get("per_iteration", [])]
    return out


def compare(cli, py):
    # "options": the CLI also records every flag of the subcommand with its default
    # (RecordContext::front_end_options); the keys Python records must all be there, equal.
    only_py = set(py["options"]) - set(cli["options"])
    assert not only_py, f"options only in the Python record: {sorted(only_py)}"
    for k, v in py["options"].items():
        assert cli["options"][k] == v, f"options.{k}: CLI {cli['options'][k]!r}, Python {v!r}"
    a, b = comparable(cli), comparable(py)
    a.pop("options")
    b.pop("options")
    assert sorted(a) == sorted(b), (sorted(set(a) ^ set(b)))
    for k in a:
        assert a[k] == b[k], f"{k}: CLI {a[k]!r}, Python {b[k]!r}"


def test_cp_record_cli_equals_python(tmp_path, tessera_bin):
    coords, vals, shape = random_sparse((9, 7, 6), 80, seed=11)
    tns = tmp_path / "x.tns"
    write_tns(tns, coords, vals)
    rec = tmp_path / "cli.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # Both front ends default to --comm-strategy auto (its figures are in both records).
    subprocess.run([tessera_bin, "cp", str(tns), "-r", "3", "-i", "6", "-s", "5", "--backend",
                    "cpu", "--threads", "1", "--json", str(rec)],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    py = tessera.cp_als(str(tns), rank=3, iters=6, seed=5, backend="cpu", threads=1)
    compare(json.loads(rec.read_text()), py.record)


def test_tucker_record_cli_equals_python(tmp_path, tessera_bin):
    coords, vals, shape = random_sparse((8, 7, 6), 90, seed=12)
    tns = tmp_path / "x.tns"
    write_tns(tns, coords, vals)
    rec = tmp_path / "cli.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run([tessera_bin, "tucker", str(tns), "-r", "3,2,2", "-i", "4", "-s", "5",
                    "--backend", "cpu", "--threads", "1", "--max-mem", "1G", "--json", str(rec)],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    # --max-mem given: its default is measured (MemAvailable) and differs between processes.
    py = tessera.tucker_hooi(str(tns), [3, 2, 2], iters=4, seed=5, max_mem="1G", backend="cpu",
                             threads=1)
    compare(json.loads(rec.read_text()), py.record)


def test_contract_record_cli_equals_python(tmp_path, tessera_bin):
    coords, vals, shape = random_sparse((8, 7, 6), 90, seed=13)
    tns = tmp_path / "x.tns"
    write_tns(tns, coords, vals)
    rec = tmp_path / "cli.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # --mem-limit given: its default is measured (MemAvailable) and differs between processes.
    subprocess.run([tessera_bin, "contract", str(tns), str(tns), "-e", "ijk,ljk->il",
                    "--mem-limit", "1G", "--backend", "cpu", "--threads", "1", "--json",
                    str(rec)], check=True, env=env, stdout=subprocess.DEVNULL)
    py = tessera.contract(str(tns), str(tns), "ijk,ljk->il", mem_limit="1G", backend="cpu",
                          threads=1)
    compare(json.loads(rec.read_text()), py.record)


def test_every_cp_option_row_is_a_flag_a_keyword_and_a_record_key(tmp_path, tessera_bin):
    # One row of the CP option table (run::kCpValues) is all an option needs: each row, set
    # to a value other than its default, is taken by `tessera cp` as its flag and by cp_als
    # as its keyword, and both records hold that value under the row's key.
    chosen = {}
    for key, (default, _help, flag, words) in tessera.CP_VALUES.items():
        assert flag == "--" + key.replace("_", "-")
        if isinstance(default, bool):
            chosen[key] = not default
            continue
        lo = float(words.split()[1]) if words.startswith(">=") else float(words.split()[0])
        hi = float("inf") if words.startswith(">=") else float(words.split()[2])
        v = default + 1 if default + 1 <= hi else (lo + hi) / 2
        chosen[key] = int(v) if isinstance(default, int) else float(v)
    assert {"rank", "iters", "tol", "seed", "max_seconds", "holdout"} <= set(chosen)
    coords, vals, shape = random_sparse((9, 7, 6), 120, seed=13)
    tns = tmp_path / "x.tns"
    write_tns(tns, coords, vals)
    rec = tmp_path / "cli.json"
    args = [tessera_bin, "cp", str(tns), "--backend", "cpu", "--threads", "1", "--json",
            str(rec)]
    for key, v in chosen.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(v, bool):
            args += [flag] if v else []
        else:
            args += [flag, repr(v)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run(args, check=True, env=env, stdout=subprocess.DEVNULL)
    cli = json.loads(rec.read_text())
    py = tessera.cp_als(str(tns), backend="cpu", threads=1, **chosen)
    for key, v in chosen.items():
        assert cli["options"][key] == v, f"CLI options.{key}: {cli['options'][key]!r}, not {v!r}"
        assert py.record["options"][key] == v, f"Python options.{key}: not {v!r}"
    compare(cli, py.record)
    assert "max_seconds=" in tessera.cp_als.__doc__ and "holdout=" in tessera.cp_als.__doc__

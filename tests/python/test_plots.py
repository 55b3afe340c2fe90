"""jobs/plot-run.py (one run record -> one PNG), the study plots' titles and comm split, and
the de-duplication of study points (jobs/studylib). Each test takes about a second."""

import importlib.util
import csv
import json
import os
import struct
import subprocess
import sys

import pytest

from conftest import random_sparse, write_tns

REPO = os.environ.get("TESSERA_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOBS = os.path.join(REPO, "jobs")
PLOT_RUN = os.path.join(JOBS, "plot-run.py")
sys.path.insert(0, JOBS)
from studylib import report as study_report  # noqa: E402
from studylib.spec import dropped_text, normalize_resources, points_of  # noqa: E402

needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                      reason="matplotlib is missing (python3-matplotlib)")


def png_text(path):
    """The PNG's text chunks (tEXt, iTXt) as {keyword: text}; asserts the PNG signature."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    out, i = {}, 8
    while i + 8 <= len(data):
        n, kind = struct.unpack(">I4s", data[i:i + 8])
        body = data[i + 8:i + 8 + n]
        if kind == b"tEXt":
            k, v = body.split(b"\0", 1)
            out[k.decode("latin-1")] = v.decode("latin-1")
        elif kind == b"iTXt":
            k, rest = body.split(b"\0", 1)
            out[k.decode("latin-1")] = rest[2:].split(b"\0", 2)[2].decode("utf-8")
        i += 12 + n
    return out


@pytest.fixture(scope="module")
def cp_record(tmp_path_factory):
    """A real cp run record of a small tensor (tessera cp ... --json)."""
    b = os.environ.get("TESSERA_BIN")
    if not b or not os.path.exists(b):
        pytest.skip("TESSERA_BIN (the tessera binary) is not set")
    d = tmp_path_factory.mktemp("plot")
    coords, vals, _ = random_sparse((9, 8, 7), 120, seed=5)
    write_tns(d / "small.tns", coords, vals)
    r = subprocess.run([b, "cp", "small.tns", "-r", "3", "-i", "4", "--backend", "cpu",
                        "--threads", "1", "--json", "rec.json"], cwd=d, capture_output=True,
                       text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stdout + r.stderr
    return d / "rec.json"


def plot_run(*args, cwd=None):
    return subprocess.run([sys.executable, PLOT_RUN, *map(str, args)], cwd=cwd,
                          capture_output=True, text=True)


def load_plot_run():
    spec = importlib.util.spec_from_file_location("plot_run", PLOT_RUN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@needs_matplotlib
def test_plot_run_png(cp_record):
    r = plot_run(cp_record)
    assert r.returncode == 0, r.stderr
    png = cp_record.with_suffix(".png")  # default: RUN.png beside the record
    assert png.stat().st_size > 10000
    j = json.loads(cp_record.read_text())
    title = png_text(png)["Title"]
    for part in ("tessera cp small.tns", "rank 3", "backend cpu", "1 rank x 1 thr",
                 f"host {j['machine']['host']}", f"commit {j['tessera']['commit'][:12]}"):
        assert part in title, (part, title)


@needs_matplotlib
def test_plot_run_validation_rmse(cp_record, tmp_path):
    """A held-out RMSE on some iterations goes on the second axis; -o names the output."""
    j = json.loads(cp_record.read_text())
    for i, row in enumerate(j["per_iteration"]):
        if i % 2:
            row["validation_rmse"] = 0.1 / (i + 1)
    j["machine"]["ranks"] = 2  # and the comm note of several ranks (in-process: faster)
    (tmp_path / "h.json").write_text(json.dumps(j))
    assert load_plot_run().main([str(tmp_path / "h.json"), "-o", str(tmp_path / "out.png")]) == 0
    assert (tmp_path / "out.png").stat().st_size > 10000


def bad_inputs(d, rec):
    """(name, arguments, what the message says) of records plot-run must refuse."""
    (d / "text.json").write_text("{ not json")
    (d / "list.json").write_text("[1, 2]")
    no_it = dict(rec)
    del no_it["per_iteration"]
    (d / "noit.json").write_text(json.dumps(no_it))
    (d / "rec.json").write_text(json.dumps(rec))
    return [("missing", [d / "nope.json"], "no such file"),
            ("not json", [d / "text.json"], "not JSON"),
            ("not a record", [d / "list.json"], "not a tessera run record"),
            ("no per_iteration", [d / "noit.json"], "no per_iteration"),
            ("output is input", [d / "rec.json", "-o", d / "rec.json"], "the output is the input"),
            ("not png", [d / "rec.json", "-o", d / "rec.pdf"], "ending in .png")]


def test_plot_run_errors(tmp_path, capsys):
    """Each refusal: exit status 2 and one line on stderr, the input untouched (in-process,
    one subprocess below checks the same from the command line)."""
    rec = {"schema": "tessera-run-record", "command": "cp",
           "per_iteration": [{"iter": 1, "fit": 0.5, "seconds": 1.0, "kernel": 0.5}]}
    main = load_plot_run().main
    for name, args, says in bad_inputs(tmp_path, rec):
        rc = main([str(a) for a in args])
        err = capsys.readouterr().err
        assert rc == 2, (name, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("plot-run: error:"), (name, err)
        assert says in lines[0], (name, lines[0])
    assert json.loads((tmp_path / "rec.json").read_text()) == rec
    r = plot_run(tmp_path / "text.json")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("plot-run: error:") and not r.stdout, r.stderr


def test_study_points_deduplicated():
    """rank applies to cp, not tucker: tucker runs once per resource, not once per rank."""
    s = {"commands": [{"command": "cp", "inputs": ["x"], "args": ["--iters", "3"]},
                      {"command": "tucker", "inputs": ["x"], "args": []}],
         "grid": {"rank": [3, 4], "backend": ["cpu"]},
         "resources": [normalize_resources({"ranks": 1}, "t"),
                       normalize_resources({"ranks": 2}, "t")]}
    pts, dropped = points_of(s)
    argv = [(p["command"], tuple(p["args"]), p["resources"]["ranks"]) for p in pts]
    assert len(argv) == len(set(argv)) == 6, argv
    tucker = [p for p in pts if p["command"] == "tucker"]
    assert [p["args"] for p in tucker] == [["--backend", "cpu"]] * 2
    assert [p["id"] for p in tucker] == ["tucker-x-backend-cpu-n1-r1-t1",
                                         "tucker-x-backend-cpu-n1-r2-t1"]
    assert len(dropped) == 2 and all(d[2] == ["rank"] for d in dropped), dropped
    text = dropped_text(dropped)
    assert text.startswith("dropped 2 duplicate point(s)") and "rank" in text, text
    assert dropped_text([]) == ""


def fake_record(kernel, comm, kernel_max, ranks, commit="0123456789abcdef" * 2 + "01234567"):
    return {"schema": "tessera-run-record", "command": "cp", "status": "ok",
            "options": {"file": "/data/small.tns", "rank": 3},
            "tessera": {"commit": commit},
            "machine": {"host": "node7", "hosts": ["node7"], "ranks": ranks, "backend": "cuda",
                        "gpus": [{"model": "NVIDIA H200", "memory_bytes": 1}] * ranks},
            "timing": {"unit": "iteration", "seconds_per_unit": kernel + comm + 0.001,
                       "split": {"kernel": kernel, "comm": comm, "solve": 0.001}},
            "kernel_per_rank": {"max_seconds_per_iteration": kernel_max,
                                "mean_seconds_per_iteration": kernel},
            "memory": {"peak_host_bytes_per_rank": [1 << 20] * ranks}}


@needs_matplotlib
def test_study_plot_title_and_comm_split(tmp_path, capsys):
    """The report's PNGs carry the study, input, machine and commit; comm splits into
    transfer and wait with kernel_per_rank."""
    out = tmp_path / "st"
    two = fake_record(0.002, 0.0015, 0.003, 2)
    two["comm_floor"] = {"seconds_per_iteration": 0.001}  # bench cp's NCCL floor, same bytes
    for ranks, rec in ((1, fake_record(0.004, 0.0001, 0.004, 1)), (2, two)):
        pdir = out / "points" / f"cp-small-n1-r{ranks}-t1"
        pdir.mkdir(parents=True)
        (pdir / "point.json").write_text(json.dumps({
            "id": pdir.name, "series": "cp small", "command": "cp",
            "resources": {"nodes": 1, "ranks": ranks, "gpus": ranks, "threads": 1}}))
        (pdir / "record.json").write_text(json.dumps(rec))
        (pdir / "rc").write_text("0\n")
    (out / "study.json").write_text(json.dumps({
        "name": "h200-scaling", "inputs": {"small": {"name": "small",
                                                     "file": "/data/small.tns"}}}))
    assert study_report.report(str(out)) == 0
    capsys.readouterr()
    for name in ("time.png", "efficiency.png", "split.png", "memory.png"):
        title = png_text(out / name)["Title"]
        for part in ("study h200-scaling", "small (small.tns)", "host node7", "NVIDIA H200",
                     "backend cuda", "commit 0123456789ab"):
            assert part in title, (name, part, title)
    rows = {r["ranks"]: r for r in study_report.collect(str(out))}
    assert rows[1]["comm_wait_seconds"] == 0.0
    assert rows[2]["comm_wait_seconds"] == pytest.approx(0.001)  # slowest 3 ms, own 2 ms
    assert rows[2]["comm_transfer_seconds"] == pytest.approx(0.0005)
    # The comm beside its NCCL floor, in the CSV and the table; none without a floor.
    assert rows[2]["comm_floor_seconds"] == 0.001
    assert rows[2]["comm_over_floor"] == pytest.approx(1.5)
    assert "comm_floor_seconds" not in rows[1]
    md = (out / "results.md").read_text()
    assert "(1.5 ms, floor 1 ms, 1.50x)" in md, md
    csv_rows = list(csv.DictReader(open(out / "results.csv")))
    assert {r["comm_over_floor"] for r in csv_rows} == {"", "1.5"}, csv_rows

"""The study file: loading and checking it, the grid of points, each point's
input arguments.
(jobs/study.py, docs/studies.md)"""

import itertools
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # jobs/
REPO = os.path.dirname(HERE)
COMMANDS = ("cp", "tucker", "contract", "bench mttkrp", "bench cp", "bench tucker",
            "bench contract")
LAUNCHERS = ("auto", "srun-pmix", "srun", "mpirun")
SPLIT_KEYS = ("kernel", "comm", "solve", "io", "other")


class StudyError(Exception):
    """A study file or option that cannot be used; the message says what to fix."""


def warn(msg):
    print(f"study: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Study file


def load_study(path):
    """Reads a TOML (.toml) or JSON (.json) study file and checks its keys."""
    try:
        with open(path, "rb") as f:
            if path.endswith(".json"):
                s = json.load(f)
            else:
                import tomllib  # Python 3.11+
                s = tomllib.load(f)
    except (OSError, ValueError) as e:
        raise StudyError(f"{path}: cannot read the study file: {e}")
    base = os.path.dirname(os.path.abspath(path))
    s.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    s.setdefault("scaling", "strong")
    if s["scaling"] not in ("strong", "weak"):
        raise StudyError(f"{path}: scaling = {s['scaling']!r}: use \"strong\" or \"weak\"")
    inputs = {}
    for i, inp in enumerate(s.get("inputs", [])):
        name = inp.get("name") or f"input{i}"
        if ("file" in inp) == ("generate" in inp):
            raise StudyError(f"{path}: input {name!r}: give exactly one of file = \"...\" or "
                             "generate = {{dims = \"AxBxC\", nnz = 1e6}}")
        if "file" in inp:
            f = expand_path(inp["file"], base)
            inp = dict(inp, file=f)
        else:
            g = inp["generate"]
            if "nnz" not in g:
                raise StudyError(f"{path}: input {name!r}: generate needs nnz")
        inputs[name] = dict(inp, name=name)
    s["inputs"] = inputs
    cmds = s.get("commands")
    if not cmds:
        raise StudyError(f"{path}: no [[commands]]: add e.g. [[commands]] command = \"cp\" "
                         "input = \"NAME\"")
    for c in cmds:
        if c.get("command") not in COMMANDS:
            raise StudyError(f"{path}: command = {c.get('command')!r}: use one of "
                             + ", ".join(COMMANDS))
        names = c.get("inputs", [c["input"]] if "input" in c else [])
        for n in names:
            if n not in inputs:
                raise StudyError(f"{path}: command {c['command']!r}: unknown input {n!r} "
                                 f"(inputs: {', '.join(inputs) or 'none'})")
        c["inputs"] = names
        c.setdefault("args", [])
    res = s.get("resources")
    if not res:
        raise StudyError(f"{path}: no [[resources]]: add e.g. [[resources]] ranks = 1")
    s["resources"] = [normalize_resources(r, path) for r in res]
    if s["scaling"] == "weak":
        for c in cmds:
            for n in c["inputs"]:
                if "file" in inputs[n]:
                    raise StudyError(f"{path}: weak scaling needs generated inputs (their nnz "
                                     f"grows with the ranks); input {n!r} is a file")
    launcher = s.get("launcher", "auto")
    if launcher not in LAUNCHERS:
        raise StudyError(f"{path}: launcher = {launcher!r}: use one of {', '.join(LAUNCHERS)}")
    s["launcher"] = launcher
    s.setdefault("grid", {})
    s.setdefault("slurm", {})
    s["_path"] = os.path.abspath(path)
    s["_base"] = base
    return s


def expand_path(p, base):
    if "TESSERA_SHARED_DATA" not in os.environ:
        os.environ["TESSERA_SHARED_DATA"] = os.path.normpath(os.path.join(REPO, "..", "shared",
                                                                          "data"))
    p = os.path.expandvars(os.path.expanduser(p))
    return p if os.path.isabs(p) else os.path.normpath(os.path.join(base, p))


def normalize_resources(r, path):
    """{nodes, gpus_per_node, ranks_per_node | ranks, threads} -> a full record."""
    nodes = int(r.get("nodes", 1))
    gpn = int(r.get("gpus_per_node", 0))
    threads = int(r.get("threads", 1))
    if "ranks" in r:
        ranks = int(r["ranks"])
        if ranks % nodes:
            raise StudyError(f"{path}: resources {r}: ranks must be a multiple of nodes")
        rpn = ranks // nodes
    else:
        rpn = int(r.get("ranks_per_node", gpn if gpn > 0 else 1))
        ranks = rpn * nodes
    if min(nodes, rpn, threads) < 1 or gpn < 0:
        raise StudyError(f"{path}: resources {r}: nodes, ranks and threads must be >= 1")
    return {"nodes": nodes, "ranks": ranks, "ranks_per_node": rpn, "gpus_per_node": gpn,
            "gpus": gpn * nodes, "threads": threads}


def grid_combos(grid):
    """Cartesian product of the grid's lists: rank, ranks, precision, backend, tier, extra."""
    keys = [k for k in ("rank", "ranks", "precision", "backend", "tier", "extra") if k in grid]
    unknown = set(grid) - set(keys)
    if unknown:
        raise StudyError(f"unknown grid key(s) {', '.join(sorted(unknown))}: use rank, ranks, "
                         "precision, backend, tier, extra")
    lists = []
    for k in keys:
        v = grid[k]
        if k == "extra":
            v = v if v and isinstance(v[0], list) else [v]
        elif not isinstance(v, list):
            v = [v]
        lists.append(v)
    for combo in itertools.product(*lists):
        yield dict(zip(keys, combo))


# The grid keys that apply only to some commands; the others apply to every command.
GRID_KEY_COMMANDS = {"rank": ("cp", "bench mttkrp", "bench cp", "bench tucker"),
                     "ranks": ("tucker", "bench tucker")}


def applicable(cmd, g):
    """The grid combination g without the keys that mean nothing to cmd (rank for tucker)."""
    return {k: v for k, v in g.items() if cmd in GRID_KEY_COMMANDS.get(k, (cmd,))}


def grid_args(cmd, g):
    g = applicable(cmd, g)
    a = []
    if "rank" in g:
        a += ["--rank", str(g["rank"])]
    if "ranks" in g:
        a += ["--ranks", str(g["ranks"])]
    for k in ("precision", "backend", "tier"):
        if k in g:
            a += [f"--{k}", str(g[k])]
    a += [str(x) for x in g.get("extra", [])]
    return a


def label_of(g):
    parts = []
    for k, v in g.items():
        if k == "extra":
            if v:
                parts.append(" ".join(str(x) for x in v))
        else:
            parts.append(f"{k}={v}")
    return " ".join(parts)


def slug(text):
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def points_of(s):
    """Every distinct point: command x grid combination x resources (inputs are per command).

    Returns (points, dropped): a grid key that does not apply to a command (rank for tucker)
    would repeat that command's runs once per value, so a point whose command line (command,
    inputs, arguments, resources) equals an earlier point's is dropped. Such keys are left out
    of the series name and point id. dropped lists (the id the point would have had with every
    grid key, the id of the point it repeats, the grid keys that did not apply)."""
    pts, seen, dropped = [], {}, []
    for c in s["commands"]:
        for g in grid_combos(dict(s["grid"], **c.get("grid", {}))):
            used = applicable(c["command"], g)
            ignored = sorted(set(g) - set(used))
            series = " ".join([c["command"]] + c["inputs"] + ([label_of(used)] if used else []))
            args = grid_args(c["command"], g) + [str(x) for x in c["args"]]
            for r in s["resources"]:
                rid = f"n{r['nodes']}-r{r['ranks']}-t{r['threads']}" + (
                    f"-g{r['gpus']}" if r["gpus"] else "")
                pid = slug(f"{series}-{rid}")
                key = (c["command"], tuple(c["inputs"]), tuple(args),
                       tuple(sorted(r.items())))
                if key in seen:  # named as before, with every grid key
                    full = " ".join([c["command"]] + c["inputs"] + ([label_of(g)] if g else []))
                    dropped.append((slug(f"{full}-{rid}"), seen[key], ignored))
                    continue
                seen[key] = pid
                pts.append({"id": pid, "series": series, "command": c["command"],
                            "inputs": c["inputs"], "grid": used, "resources": r,
                            "args": args})
    ids = [p["id"] for p in pts]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise StudyError(f"two points share an id ({', '.join(sorted(dup))}): make the commands "
                         "or grid entries differ")
    return pts, dropped


def dropped_text(dropped):
    """One line on the duplicate points points_of dropped, or "" when none was."""
    if not dropped:
        return ""
    keys = sorted({k for _, _, ign in dropped for k in ign})
    why = (f"grid key(s) {', '.join(keys)} do not apply to their command" if keys
           else "the same command and grid entry is listed twice")
    return (f"dropped {len(dropped)} duplicate point(s) with the command line of another "
            f"point ({why}): " + ", ".join(f"{d} = {k}" for d, k, _ in dropped[:6])
            + (", ..." if len(dropped) > 6 else ""))


def scale_nnz(s, p, inp):
    nnz = float(inp["generate"]["nnz"])
    if s["scaling"] == "weak":
        nnz *= p["resources"]["ranks"]
    return nnz


def input_args(s, p, out):
    """Positional/`--generate` arguments of a point and the files to generate first."""
    args, gens = [], []
    bench = p["command"].startswith("bench")
    for n in p["inputs"]:
        inp = s["inputs"][n]
        if "file" in inp:
            args.append(inp["file"])
            continue
        g = inp["generate"]
        nnz = scale_nnz(s, p, inp)
        if bench and p["command"] == "bench contract":
            args += ["--generate", "--nnz", f"{nnz:g}"]
        elif bench:
            args += ["--generate", g["dims"], "--nnz", f"{nnz:g}"]
        else:
            ext = g.get("format", "tns")
            f = os.path.join(out, "inputs", slug(f"{n}-{g['dims']}-{nnz:.0f}") + f".{ext}")
            gen = ["generate", "--dims", g["dims"], "--nnz", f"{nnz:g}", "--out", f]
            for k in ("rank", "noise", "seed", "dist", "alpha", "structure"):
                if k in g:
                    gen += [f"--{k}", str(g[k])]
            gens.append((f, gen))
            args.append(f)
    return args, gens

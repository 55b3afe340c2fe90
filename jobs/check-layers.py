#!/usr/bin/env python3
"""Checks that every #include "module/..." of a tracked source file is allowed by the layer
table of docs/architecture.md (between <!-- layers:begin --> and <!-- layers:end -->), that
no include reaches another module's folder by a bare name ("common.hpp" found through an
include path, or "../x.hpp"), that no CMake include path (target_include_directories) puts
a folder of a module on the path of a module the table does not let include it, and that
the README's layout block names every top-level folder of the repository and no other.

Usage: jobs/check-layers.py [--list] [--root DIR]
  --list       print the table as read and the include counts per pair of modules
  --root DIR   check the repository at DIR (default: the one holding this script)
Exit status 1, with one line per offending include (file:line: module -> module), when an
include breaks the table; 2 when the table cannot be read.
"""
import os
import re
import subprocess
import sys
from collections import Counter

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
if "--root" in sys.argv[1:]:
    ROOT = os.path.abspath(sys.argv[sys.argv.index("--root") + 1])
DOC = os.path.join("docs", "architecture.md")
SOURCES = (".cpp", ".hpp", ".cu", ".cuh", ".h")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
INCLUDE_DIRS = re.compile(r"target_include_directories\s*\((.*?)\)", re.S)
CMAKE_DIRS = {"${PROJECT_SOURCE_DIR}": "", "${CMAKE_SOURCE_DIR}": ""}


def read_table():
    """{module: (folder, set of modules it may include)} from the doc's table."""
    path = os.path.join(ROOT, DOC)
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        sys.exit(f"check-layers: cannot read {DOC}: {e.strerror}")
    m = re.search(r"<!-- layers:begin -->(.*?)<!-- layers:end -->", text, re.S)
    if m is None:
        print(f"check-layers: {DOC}: no <!-- layers:begin --> ... <!-- layers:end --> table",
              file=sys.stderr)
        sys.exit(2)
    table = {}
    first = text[: m.start()].count("\n") + 1
    for k, line in enumerate(m.group(1).splitlines()):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[1]:
            if line.strip():
                print(f"check-layers: {DOC}:{first + k}: expected | layer | module | folder | "
                      f"may include |, got: {line.strip()}", file=sys.stderr)
                sys.exit(2)
            continue
        _, module, folder, allowed = cells
        table[module] = (folder.rstrip("/"), set(allowed.split()))
    for module, (_, allowed) in table.items():
        unknown = allowed - set(table)
        if unknown:
            print(f"check-layers: {DOC}: {module} may include unknown modules "
                  f"{' '.join(sorted(unknown))}", file=sys.stderr)
            sys.exit(2)
    return table


def module_of(path, table):
    """The table's module whose folder is the longest prefix of path, or None."""
    best, best_len = None, -1
    for module, (folder, _) in table.items():
        if (path == folder or path.startswith(folder + "/")) and len(folder) > best_len:
            best, best_len = module, len(folder)
    return best


def include_target(prefix, table):
    """The module an include "prefix/..." names: the module of that name, or the one whose
    folder ends with it (src/base/io is included as "io/...")."""
    if prefix in table:
        return prefix
    for module, (folder, _) in table.items():
        if folder.split("/")[-1] == prefix:
            return module
    return None


def bare_include_target(f, name, src, table, by_base):
    """The module a bare or relative include `name` of file `f` (module `src`) reaches when
    it is another module's file: next to `f` (or ../) first, else any tracked file of that
    path found through an include path. None when it stays in `src` or is not tracked."""
    here = os.path.normpath(os.path.join(os.path.dirname(f), name))
    if os.path.isfile(os.path.join(ROOT, here)):
        dst = module_of(here, table)
        return dst if dst not in (None, src) else None
    candidates = [p for p in by_base.get(os.path.basename(name), [])
                  if p == name or p.endswith("/" + name)]
    mods = {module_of(p, table) for p in candidates} - {None}
    if not mods or src in mods:
        return None
    return sorted(mods)[0]


def check_cmake_include_dirs(files, table):
    """Lines naming a target_include_directories entry that puts a folder of module D on the
    path of a target in module S that the table does not let include D."""
    out = []
    for f in files:
        if not (f.endswith("CMakeLists.txt") or f.endswith(".cmake")):
            continue
        src = module_of(os.path.dirname(f), table)
        if src is None or not os.path.isfile(os.path.join(ROOT, f)):
            continue
        text = open(os.path.join(ROOT, f), encoding="utf-8", errors="replace").read()
        here = os.path.dirname(f)
        for m in INCLUDE_DIRS.finditer(text):
            line = text[: m.start()].count("\n") + 1
            for tok in m.group(1).split():
                path = None
                for var, base in list(CMAKE_DIRS.items()) + [("${CMAKE_CURRENT_SOURCE_DIR}", here)]:
                    if tok.startswith(var):
                        path = os.path.normpath(os.path.join(base, tok[len(var):].lstrip("/")))
                if path is None:
                    continue
                dst = module_of(path, table)
                if dst is not None and dst != src and dst not in table[src][1]:
                    out.append(f"{f}:{line}: include path {path}/ puts {dst} on {src}'s path "
                               f"(not in {DOC}'s table)")
    return out


def check_readme_layout(files):
    """Lines naming a folder missing from, or absent in, the README's "## Layout" block."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    m = re.search(r"^## Layout\s*\n+```\n(.*?)```", text, re.S | re.M)
    if m is None:
        return ["README.md: no \"## Layout\" section with a ``` block"]
    listed = set(re.findall(r"^([A-Za-z0-9_.-]+)/", m.group(1), re.M))
    tree = {f.split("/")[0] for f in files if "/" in f and not f.startswith(".")}
    out = [f"README.md: the layout block does not name the folder {d}/" for d in sorted(tree - listed)]
    out += [f"README.md: the layout block names {d}/, which is not in the tree"
            for d in sorted(listed - tree)]
    return out


def main():
    table = read_table()
    # Tracked files and the untracked ones git does not ignore (a new file counts before
    # its first commit).
    files = subprocess.run(["git", "-C", ROOT, "ls-files", "--cached", "--others",
                            "--exclude-standard"], check=True, capture_output=True,
                           text=True).stdout.split()
    bad, pairs = [], Counter()
    by_base = {}
    for f in files:
        by_base.setdefault(os.path.basename(f), []).append(f)
    for f in files:
        if not f.endswith(SOURCES):
            continue
        src = module_of(f, table)
        if src is None or not os.path.isfile(os.path.join(ROOT, f)):
            continue
        with open(os.path.join(ROOT, f), encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m or include_target(m.group(1), table) is None:
                    b = ANY_INCLUDE.match(line)
                    dst = b and bare_include_target(f, b.group(1), src, table, by_base)
                    if dst:
                        bad.append(f"{f}:{n}: {src} -> {dst} by the bare name \"{b.group(1)}\" "
                                   f"(include it as \"{dst}/...\" where the table allows it)")
                    continue
                dst = include_target(m.group(1), table)
                if dst is None:
                    continue
                pairs[(src, dst)] += 1
                if dst not in table[src][1]:
                    bad.append(f"{f}:{n}: {src} -> {dst} (not in {DOC}'s table)")
    if "--list" in sys.argv[1:]:
        for module, (folder, allowed) in table.items():
            print(f"{module:10} {folder:16} may include {' '.join(sorted(allowed))}")
        for (s, d), c in sorted(pairs.items()):
            print(f"{s:10} -> {d:10} {c}")
    bad += check_cmake_include_dirs(files, table)
    bad += check_readme_layout(files)
    for b in bad:
        print(b)
    if bad:
        print(f"check-layers: {len(bad)} problem(s): includes or include paths that break the "
              f"layers of {DOC}, or README.md's layout block out of step with the tree",
              file=sys.stderr)
        return 1
    print(f"check-layers: {sum(pairs.values())} includes across modules, all within {DOC}'s "
          "table, none by a bare name; no include path crosses it; README.md's layout block "
          "names every top-level folder")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checks that every #include "module/..." of a tracked source file is allowed by the layer
table of docs/architecture.md (between <!-- layers:begin --> and <!-- layers:end -->), and
that the README's layout block names every top-level folder of the repository and no other.

Usage: jobs/check-layers.py [--list]
  --list   print the table as read and the include counts per pair of modules
Exit status 1, with one line per offending include (file:line: module -> module), when an
include breaks the table; 2 when the table cannot be read.
"""
import os
import re
import subprocess
import sys
from collections import Counter

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DOC = os.path.join("docs", "architecture.md")
SOURCES = (".cpp", ".hpp", ".cu", ".cuh", ".h")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


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
    files = subprocess.run(["git", "-C", ROOT, "ls-files"], check=True, capture_output=True,
                           text=True).stdout.split()
    bad, pairs = [], Counter()
    for f in files:
        if not f.endswith(SOURCES):
            continue
        src = module_of(f, table)
        if src is None or not os.path.isfile(os.path.join(ROOT, f)):
            continue
        with open(os.path.join(ROOT, f), encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
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
    bad += check_readme_layout(files)
    for b in bad:
        print(b)
    if bad:
        print(f"check-layers: {len(bad)} problem(s): includes that break the layers of {DOC}, "
              "or README.md's layout block out of step with the tree", file=sys.stderr)
        return 1
    print(f"check-layers: {sum(pairs.values())} includes across modules, all within {DOC}'s "
          "table; README.md's layout block names every top-level folder")
    return 0


if __name__ == "__main__":
    sys.exit(main())

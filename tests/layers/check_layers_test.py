#!/usr/bin/env python3
"""jobs/check-layers.py on small trees: one that keeps the layers, and one change for each
rule it must reject (a module include outside the table, a bare-name include across folders,
a CMake include path across the table). Run by .ci/run after the check itself; exits 1 on
the first case that does not give the expected status."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.normpath(os.path.join(HERE, "..", "..", "jobs", "check-layers.py"))

TABLE = """# map
<!-- layers:begin -->
| 0 | util | base/util | util |
| 1 | run | engine/run | run util |
| 2 | cli | cli | cli run util |
| 2 | py | py | py run util |
<!-- layers:end -->
"""
README = "## Layout\n\n```\nbase/\nengine/\ncli/\npy/\ndocs/\n```\n"
GOOD = {
    "docs/architecture.md": TABLE,
    "README.md": README,
    "base/util/log.hpp": "#pragma once\n",
    "engine/run/run.hpp": '#pragma once\n#include "util/log.hpp"\n',
    "cli/common.hpp": '#pragma once\n#include "run/run.hpp"\n',
    "cli/sub/cmd.cpp": '#include "common.hpp"\n',  # bare, but in its own module
    "py/src/mod.cpp": '#include "run/run.hpp"\n#include "local.hpp"\n',
    "py/src/local.hpp": "#pragma once\n",
    "py/CMakeLists.txt": "target_include_directories(m PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src\n"
                         "  ${PROJECT_SOURCE_DIR}/engine)\n",
}
CASES = [
    ("the tree as it should be", {}, 0),
    ("py includes cli/ by its module name", {"py/src/mod.cpp": '#include "cli/common.hpp"\n'}, 1),
    ("py includes cli's common.hpp by a bare name",
     {"py/src/mod.cpp": '#include "common.hpp"\n'}, 1),
    ("py includes a cli header by a relative path",
     {"py/src/mod.cpp": '#include "../../cli/common.hpp"\n'}, 1),
    ("py's CMake puts cli/ on its include path",
     {"py/CMakeLists.txt": "target_include_directories(m PRIVATE ${PROJECT_SOURCE_DIR}/cli)\n"},
     1),
    ("run includes upward (py) by a bare name", {"engine/run/run.hpp": '#include "local.hpp"\n'},
     1),
]


def tree(root, files):
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)
    subprocess.run(["git", "init", "-q", root], check=True)
    subprocess.run(["git", "-C", root, "add", "-A"], check=True)


def main():
    failed = 0
    for what, change, want in CASES:
        with tempfile.TemporaryDirectory() as root:
            tree(root, {**GOOD, **change})
            r = subprocess.run([sys.executable, CHECK, "--root", root], capture_output=True,
                               text=True)
            ok = r.returncode == want
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {what}: exit {r.returncode}, expected {want}")
            if not ok:
                print(r.stdout + r.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

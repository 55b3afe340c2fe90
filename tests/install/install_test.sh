#!/usr/bin/env bash
# cmake --install of a build tree into a temporary folder (cmake/TesseraInstall.cmake), then
# what a user of the install needs: bin/tessera --version runs from there; the Python module
# is there and imports from there (not from the build tree); the Slurm scripts, LICENSE and
# the module's headers are there; every #include "..." of the installed headers and of the
# module's sources (python/src) resolves inside the installed include/tessera.
#   install_test.sh BUILD_DIR SOURCE_DIR [MODULE_DIR [PYTHON]]
# MODULE_DIR: TESSERA_PYTHON_INSTALL_DIR, empty when the module was not built. DESTDIR keeps
# every file under the temporary folder, also with an absolute MODULE_DIR.
set -euo pipefail
build=$1 src=$2 module_dir=${3:-} python=${4:-python3}
fail() { echo "install_test: FAILED: $*"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tessera-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=/opt/tessera
DESTDIR="$tmp" cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" ||
  { cat "$tmp/install.log"; fail "cmake --install $build"; }
root=$tmp$prefix

version=$("$root/bin/tessera" --version) || fail "$root/bin/tessera --version"
[[ $version == tessera\ * ]] || fail "bin/tessera --version printed '$version'"
echo "installed: $version"

for f in share/tessera/slurm/cp.sbatch share/tessera/slurm/resumable.sbatch \
  share/tessera/slurm/launch.sh share/tessera/slurm/emulate-node.sh \
  share/doc/tessera/LICENSE share/doc/tessera/README.md \
  include/tessera/run/cp.hpp; do
  [ -f "$root/$f" ] || fail "$f is not installed"
done
[ -x "$root/share/tessera/slurm/cp.sbatch" ] || fail "share/tessera/slurm/cp.sbatch not executable"

if [ -n "$module_dir" ]; then
  case $module_dir in
    /*) site=$tmp$module_dir ;;
    *) site=$root/$module_dir ;;
  esac
  [ -f "$site/tessera/__init__.py" ] || fail "the Python package is not in $site/tessera"
  ls "$site"/tessera/_tessera*.so > /dev/null 2>&1 || fail "no _tessera*.so in $site/tessera"
  where=$(cd "$tmp" && PYTHONPATH=$site "$python" -c \
    "import os, tessera; print(os.path.dirname(os.path.realpath(tessera.__file__)))") ||
    fail "import tessera from $site"
  [ "$where" = "$(realpath "$site/tessera")" ] || fail "tessera imported from $where, not $site"
  echo "module: $site/tessera imports"
else
  echo "module: not built, not checked"
fi

# Every quoted include of an installed header, and of the module's sources, is found next
# to the including file or under include/tessera.
"$python" - "$root/include/tessera" "$src/python/src" << 'PY'
import os, re, sys
inc, pysrc = sys.argv[1], sys.argv[2]
quoted = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
files = [os.path.join(d, f) for d, _, fs in os.walk(inc) for f in fs]
files += [os.path.join(pysrc, f) for f in os.listdir(pysrc) if f.endswith((".cpp", ".hpp"))]
missing = []
for path in files:
    for name in quoted.findall(open(path, encoding="utf-8").read()):
        if not any(os.path.isfile(os.path.join(d, name)) for d in (os.path.dirname(path), inc)):
            missing.append(f"{path}: #include \"{name}\"")
print(f"headers: {len(files)} files, installed headers {sum(f.startswith(inc) for f in files)}")
if missing:
    print("install_test: FAILED: not installed (cmake/TesseraInstall.cmake):", *missing, sep="\n  ")
    sys.exit(1)
PY
echo "install_test: passed"

#!/usr/bin/env bash
# Format check of the C++ and CUDA sources (docs/reliability.md, "What CI enforces"), with
# the repository's .clang-format and clang-format 14 (installed through jobs/setup.sh when
# missing). CI runs the check before the tests (.ci/run).
#   jobs/format.sh          check: lists every tracked .cpp/.hpp/.cu/.cuh/.h file that
#                           clang-format-14 would change (repository-relative paths) and
#                           exits 1 if there is one; changes nothing
#   jobs/format.sh --fix    reformats those files in place
# Environment: TESSERA_CLANG_FORMAT (the clang-format binary; default clang-format-14),
#              TESSERA_JOBS (parallel clang-format processes; default nproc).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
mode=check
case "${1:-}" in
  "") ;;
  --fix) mode=fix ;;
  -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "format: unknown argument '$1' (usage: jobs/format.sh [--fix])" >&2; exit 2 ;;
esac

# One clang-format version for everyone: another major version formats some constructs
# differently, and the check would flip-flop between machines.
cf=${TESSERA_CLANG_FORMAT:-clang-format-14}
if ! command -v "$cf" >/dev/null; then
  "$here/jobs/setup.sh" --packages clang-format-14
fi
command -v "$cf" >/dev/null || { echo "format: $cf not found after jobs/setup.sh" >&2; exit 2; }
git rev-parse --is-inside-work-tree >/dev/null 2>&1 ||
  { echo "format: $here is not a git checkout (the check covers tracked files)" >&2; exit 2; }

# Tracked sources that exist in the work tree (a file deleted but not yet committed is skipped).
files=()
while IFS= read -r -d '' f; do
  [ -f "$f" ] && files+=("$f")
done < <(git ls-files -z -- '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h')
[ ${#files[@]} -gt 0 ] || { echo "format: no source file found"; exit 0; }

# Files clang-format would change: --dry-run -Werror reports each as
# "FILE:LINE:COL: error: code should be clang-formatted" (one line per file with
# --ferror-limit=1); any other failure (a broken .clang-format, an unreadable file) stops here.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export cf tmp
# shellcheck disable=SC2016  # expanded by the inner bash
printf '%s\0' "${files[@]}" | xargs -0 -n 32 -P "${TESSERA_JOBS:-$(nproc)}" bash -c \
  '"$cf" --dry-run -Werror --ferror-limit=1 "$@" >/dev/null 2>"$(mktemp "$tmp/chunk.XXXXXX")" || true' _
log=$tmp/all
cat "$tmp"/chunk.* >"$log"
mapfile -t bad < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' "$log" |
  LC_ALL=C sort -u)
other=$(grep -E '(^|: )error:' "$log" | grep -v 'code should be clang-formatted' | sort -u || true)
if [ -n "$other" ]; then
  head -20 <<<"$other" >&2
  echo "format: $cf failed (above)" >&2
  exit 2
fi

if [ ${#bad[@]} -eq 0 ]; then
  echo "format: ${#files[@]} files checked, all formatted ($("$cf" --version | grep -o 'version [0-9.]*'))"
  exit 0
fi
if [ "$mode" = fix ]; then
  printf '%s\0' "${bad[@]}" | xargs -0 -n 8 -P "${TESSERA_JOBS:-$(nproc)}" "$cf" -i
  printf 'format: reformatted %s\n' "${bad[@]}"
  echo "format: ${#bad[@]} of ${#files[@]} files reformatted"
  exit 0
fi
printf '%s\n' "${bad[@]}"
echo "format: ${#bad[@]} of ${#files[@]} files need clang-format; run jobs/format.sh --fix" >&2
exit 1

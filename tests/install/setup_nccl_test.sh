#!/usr/bin/env bash
# jobs/setup-nccl.sh with a fake toolkit and a fake apt (commands on PATH that record their
# arguments), so its two paths run here, where apt knows no NVIDIA repository:
#   1. apt offers libnccl-dev for CUDA 12 and 13 and nvcc says 13.0: it installs the +cuda13
#      build of libnccl2 and libnccl-dev, exactly that version;
#   2. apt offers none: it prints the hint (naming libnccl-dev, NCCL_ROOT) and installs nothing;
#   3. nccl.h present under NCCL_ROOT: it does nothing.
# Every case exits 0 (set-up never fails for NCCL). Under a second.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "setup_nccl_test: FAILED: $*"; exit 1; }
mkdir -p "$tmp/cuda/bin" "$tmp/bin" "$tmp/nccl/include"
cat >"$tmp/cuda/bin/nvcc" <<'EOT'
#!/bin/sh
echo "Cuda compilation tools, release 13.0, V13.0.88"
EOT
cat >"$tmp/bin/apt-get" <<'EOT'
#!/bin/sh
echo "apt-get $*" >>"$FAKE_LOG"
EOT
cat >"$tmp/bin/apt-cache" <<'EOT'
#!/bin/sh
[ -f "$FAKE_MADISON" ] || exit 0
[ "$1" = madison ] && cat "$FAKE_MADISON"
[ "$1" = policy ] && echo "  Candidate: (none)"
exit 0
EOT
chmod +x "$tmp/cuda/bin/nvcc" "$tmp/bin/apt-get" "$tmp/bin/apt-cache"
cat >"$tmp/madison" <<'EOT'
libnccl-dev | 2.28.9-1+cuda13.0 | https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64  Packages
libnccl-dev | 2.28.9-1+cuda12.9 | https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64  Packages
libnccl-dev | 2.27.7-1+cuda13.0 | https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64  Packages
EOT
run() {  # case name, madison file or "", search list
  : >"$tmp/log"
  env PATH="$tmp/bin:$PATH" CUDACXX="$tmp/cuda/bin/nvcc" FAKE_LOG="$tmp/log" FAKE_MADISON="$1" \
    TESSERA_NCCL_SEARCH="$2" SUDO= UPDATED=1 bash "$repo/jobs/setup-nccl.sh" >"$tmp/out" 2>&1
}

run "$tmp/madison" "$tmp/none" || fail "case 1 exited $?: $(cat "$tmp/out")"
grep -qx "apt-get install -y -qq libnccl2=2.28.9-1+cuda13.0 libnccl-dev=2.28.9-1+cuda13.0" "$tmp/log" ||
  fail "case 1: expected the +cuda13.0 build installed, apt-get got: $(cat "$tmp/log")"
grep -q "installing NCCL 2.28.9-1+cuda13.0" "$tmp/out" || fail "case 1 said: $(cat "$tmp/out")"

run "" "$tmp/none" || fail "case 2 exited $?"
[ ! -s "$tmp/log" ] || fail "case 2: apt-get was called: $(cat "$tmp/log")"
grep -q "CUDA found ($tmp/cuda/bin/nvcc) but not NCCL" "$tmp/out" && grep -q "NCCL_ROOT=DIR" "$tmp/out" &&
  grep -q "libnccl-dev" "$tmp/out" || fail "case 2: no hint: $(cat "$tmp/out")"

touch "$tmp/nccl/include/nccl.h"
run "$tmp/madison" "$tmp/nccl" || fail "case 3 exited $?"
[ ! -s "$tmp/log" ] && [ ! -s "$tmp/out" ] || fail "case 3: NCCL present, yet: $(cat "$tmp/log" "$tmp/out")"
echo "setup_nccl_test: passed (install from a NVIDIA-style apt, hint without one, nothing when present)"

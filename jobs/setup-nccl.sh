#!/usr/bin/env bash
# NCCL for the CUDA backend, called by jobs/setup.sh (tested by tests/install/setup_nccl_test.sh).
# Where a CUDA toolkit (nvcc: CUDACXX or PATH) is present and NCCL is not (nccl.h under
# NCCL_ROOT, NCCL_HOME, the toolkit, /usr/local/cuda or /usr; TESSERA_NCCL_SEARCH replaces
# that list), installs libnccl2 and libnccl-dev from apt: the newest version built for
# nvcc's CUDA major (apt-cache madison), else apt's candidate. NCCL's packages come from
# NVIDIA's CUDA apt repository, not Debian's; where apt does not know them, a hint says how
# to get them. Never fails: without NCCL the build is CPU-only (CMake says so too).
# Environment from setup.sh: SUDO ("sudo" when not root), UPDATED (1: apt lists already read).
set -uo pipefail
sudo=${SUDO:-}
updated=${UPDATED:-0}
nvcc=${CUDACXX:-$(command -v nvcc || true)}
if [ -n "$nvcc" ] && [ -x "$nvcc" ]; then
  cuda_root=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
  has_nccl=0
  for d in ${TESSERA_NCCL_SEARCH:-"${NCCL_ROOT:-}" "${NCCL_HOME:-}" "$cuda_root" /usr/local/cuda /usr}; do
    [ -n "$d" ] && [ -e "$d/include/nccl.h" ] && has_nccl=1
  done
  if [ "$has_nccl" = 0 ]; then
    nccl_version() {  # newest libnccl-dev built for this CUDA major, else apt's candidate
      local major v
      major=$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p' || true)
      v=$(apt-cache madison libnccl-dev 2>/dev/null |
        awk -v m="+cuda$major." 'index($3, m) { print $3; exit }' || true)
      [ -z "$v" ] && v=$(apt-cache policy libnccl-dev 2>/dev/null |
        awk '/Candidate:/ { print $2 }' || true)
      [ "$v" = "(none)" ] && v=""
      echo "$v"
    }
    v=$(nccl_version)
    # Lists older than a newly added CUDA repository: read once more (only where one is).
    if [ -z "$v" ] && [ "$updated" = 0 ] &&
      grep -rqsiE "cuda|nvidia" /etc/apt/sources.list /etc/apt/sources.list.d/; then
      $sudo apt-get update -qq >/dev/null 2>&1 || true
      v=$(nccl_version)
    fi
    if [ -n "$v" ]; then
      echo "setup: CUDA found ($nvcc): installing NCCL $v (libnccl2 libnccl-dev)"
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "libnccl2=$v" "libnccl-dev=$v" \
        >/dev/null || echo "setup: warning: installing NCCL failed; the build will be CPU-only" >&2
    else
      cat >&2 <<EOT
setup: warning: CUDA found ($nvcc) but not NCCL: the build will be CPU-only
setup:   (--backend cuda answers 'built without CUDA'). NCCL's packages, libnccl2 and
setup:   libnccl-dev, come from NVIDIA's CUDA apt repository, which apt here does not know.
setup:   Add it (NVIDIA's cuda-keyring package for this distribution), then
setup:     apt-get update && apt-get install libnccl2 libnccl-dev && jobs/setup.sh
setup:   or unpack NCCL anywhere and export NCCL_ROOT=DIR (docs: README, "Run on GPUs").
EOT
    fi
  fi
fi
exit 0

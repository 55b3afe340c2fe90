#!/usr/bin/env bash
# Writes a tags file (universal-ctags) of the repository's C++ and CUDA sources at the
# repository root, with qualified names, so an editor finds each operation's definition per
# backend with its signature: `vim -t tessera::kernels::cuda::mttkrp`, or `:tag mttkrp` to
# choose among reference::, cpu:: and cuda:: (docs/architecture.md, "Finding an operation").
# .cu/.cuh are read as C++ (universal-ctags' CUDA parser records no namespaces).
#   jobs/tags.sh [OUTPUT]   default OUTPUT: tags
set -euo pipefail
cd "$(dirname "$0")/.."
command -v ctags >/dev/null || { echo "tags: universal-ctags not found (apt install universal-ctags)" >&2; exit 2; }
ctags -R --langmap=C++:+.cu.cuh --fields=+nS --extras=+q -f "${1:-tags}" \
  src comm partition kernels drivers python/src tests

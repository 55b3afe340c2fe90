#!/usr/bin/env bash
# Downloads the Debian packages a GPU node lacks (it has no network) into .deps/, to be
# carried there and unpacked by jobs/gpu-node.sh into a private prefix.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$here/.deps"
cd "$here/.deps"
apt-get download libcli11-dev nlohmann-json3-dev liblapack3 liblapack-dev libblas3 libblas-dev \
  libgfortran5 zlib1g-dev libopenblas0-pthread
ls -la

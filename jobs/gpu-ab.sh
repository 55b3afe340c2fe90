#!/bin/bash
# Interleaved before/after of the architecture benchmark set (issue 17) on one GPU: the base
# build and the new one alternate, case by case, for ROUNDS rounds (default 3), so that a
# drift of the card (clocks, temperature) falls on both alike; jobs/latency_table.py prints
# every run. Run after `TESSERA_BASE_TAR=... jobs/gpu-node.sh latency`, which builds both
# (build-gpu/ and build-base/):
#
#     jobs/gpu-ab.sh [ROUNDS]     results in $OUT/ab (or results/ab)
#
# Cases: CP-ALS on congress R 16 and 32 (26 iterations) and on the nell-2 shape R 32, MTTKRP
# congress R 16 and nell-2 R 32, TTMc and Tucker-HOOI on nell-2 (16,16,16), and the generated
# SpTC with 1.2e9 products. Compare medians over the rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rounds=${1:-3}
o=${OUT:-results}/ab
mkdir -p "$o"
C=
for d in ${TESSERA_DATA:-} ../shared/data .deps/data; do
  [ -f "$d/congress-cosponsor_leg-leg-year.tns.gz" ] && { C=$d/congress-cosponsor_leg-leg-year.tns.gz; break; }
done
[ -n "$C" ] || echo "gpu-ab: congress not found (TESSERA_DATA, ../shared/data, .deps/data): its cases are skipped"
for b in build-base/drivers/tessera build-gpu/drivers/tessera; do
  [ -x "$b" ] || { echo "gpu-ab: $b missing: run jobs/gpu-node.sh latency with TESSERA_BASE_TAR first" >&2; exit 2; }
done
nell=12092x9184x28818
f="--backend cuda --precision float"
for i in $(seq 1 "$rounds"); do
  for lab in base new; do
    b=build-gpu/drivers/tessera
    [ "$lab" = base ] && b=build-base/drivers/tessera
    j() { echo "--json $o/lat-$lab-$1-$i.json"; }
    if [ -n "$C" ]; then
      for R in 16 32; do
        $b cp "$C" --rank $R --iters 26 --tol 0 $f $(j congress-cp-r$R) >/dev/null 2>&1 || true
      done
    fi
    $b bench cp --generate $nell --nnz 76.9e6 --rank 32 $f --iters 11 $(j nell2-cp-r32) >/dev/null 2>&1 || true
    if [ -n "$C" ]; then
      $b bench mttkrp "$C" --rank 16 $f --repeat 20 $(j congress-mttkrp-r16) >/dev/null 2>&1 || true
    fi
    $b bench mttkrp --generate $nell --nnz 76.9e6 --rank 32 $f --repeat 10 $(j nell2-mttkrp-r32) \
      >/dev/null 2>&1 || true
    $b bench ttmc --generate $nell --nnz 76.9e6 --ranks 16,16,16 $f --repeat 10 $(j nell2-ttmc-16) \
      >/dev/null 2>&1 || true
    $b bench tucker --generate $nell --nnz 76.9e6 --ranks 16,16,16 $f --iters 6 $(j nell2-tucker-16) \
      >/dev/null 2>&1 || true
    $b bench contract --generate --nnz 2e7 --products 1.2e9 --backend cuda --precision double \
      --repeat 3 --no-reference $(j sptc-gen) >/dev/null 2>&1 || true
  done
done
python3 jobs/latency_table.py "$o" | sort -k1,1

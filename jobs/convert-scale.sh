#!/usr/bin/env bash
# Scale check of the HDF5 tensor store (issue 5): a FROSTT text file of NNZ lines (1e9 by
# default, about 30 GB) converted to the store on NP ranks, with the throughput in lines/s
# and MB/s next to a plain sequential read of the same file; then the store read back.
#   NP=8 NNZ=1e9 DIR=/scratch/$USER/scale jobs/convert-scale.sh
# Needs DIR to hold about 2x the text size (the text and its store; the generated store,
# float32 values, is removed once the text is written). Run as root (or
# with sudo rights for /proc/sys/vm/drop_caches) to get cold-cache numbers; otherwise the
# second read of a file that fits in memory comes from the page cache (said in the output).
# NO_DROP_CACHES=1 leaves the page cache alone (shared machines).
# Results: DIR/convert-warm.json, DIR/convert-cold.json; a summary is printed last.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
NP=${NP:-8}
NNZ=${NNZ:-1e9}
DIR=${DIR:-/tmp/tessera-scale}
T=${TESSERA:-$here/build/drivers/tessera}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() {
  if [ -n "${SLURM_JOB_ID:-}" ]; then srun -n "$NP" "$T" "$@"; else mpirun -np "$NP" --oversubscribe "$T" "$@"; fi
}
drop_caches() {
  sync
  if [ -n "${NO_DROP_CACHES:-}" ]; then echo "note: NO_DROP_CACHES set: reads may be served from memory"; return; fi
  if (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null || sudo -n sh -c 'echo 3 > /proc/sys/vm/drop_caches' 2>/dev/null; then
    echo "page cache dropped"
  else
    echo "note: could not drop the page cache: the next read may be served from memory"
  fi
}
mkdir -p "$DIR"
# 1. A tensor of NNZ nonzeros, streamed straight to a store, then written as text.
run generate --dims 1000000x800000x600000 --nnz "$NNZ" --rank 8 --structure sampled \
  --dist powerlaw --noise 0.01 --value-type float32 --out "$DIR/gen.h5"
run convert "$DIR/gen.h5" "$DIR/big.tns"
rm -f "$DIR/gen.h5"
ls -l "$DIR/big.tns"
# 2. text -> store: the plain sequential read first (cold), then the parallel parse.
drop_caches
run convert "$DIR/big.tns" "$DIR/big.h5" --compare-sequential-read --json "$DIR/convert-warm.json"
# 3. The same with a cold cache for the parallel parse itself (the first store removed:
#    the write needs its room).
rm -f "$DIR/big.h5"
drop_caches
run convert "$DIR/big.tns" "$DIR/big.h5" --json "$DIR/convert-cold.json"
# 4. Reading the store back (checksums, ranges) on all ranks.
drop_caches
run info "$DIR/big.h5" --verify
python3 - "$DIR" <<'PY'
import json, sys
d = sys.argv[1]
w = json.load(open(f"{d}/convert-warm.json"))
c = json.load(open(f"{d}/convert-cold.json"))
s = w["sequential_read"]
print(f"sequential read (rank 0, cold): {s['bytes']/1e9:.1f} GB at {s['bytes_per_s']/1e6:.0f} MB/s")
for name, j in (("after the sequential read", w), ("cold", c)):
    r, wr = j["read"], j["write"]
    print(f"parallel parse on {j['machine']['ranks']} ranks ({name}): {r['nnz_per_s']/1e6:.1f} M lines/s, "
          f"{r['bytes_per_s']/1e6:.0f} MB/s = {r['bytes_per_s']/s['bytes_per_s']:.2f}x the sequential read; "
          f"store written at {wr['bytes_per_s']/1e6:.0f} MB/s ({wr['mode']})")
PY

#!/usr/bin/env bash
# One call on a GPU node (no network): unpack the carried Debian packages, build with all
# cores, run the GPU tests, run the benchmarks, print a summary table last.
#
#   jobs/fetch-deps.sh            # once, on a machine with apt: downloads .deb files to .deps/
#   jobs/gpu-node.sh [tests|quick|full]
#       tests: build and run the GPU tests (ctest -L gpu) and an end-to-end `tessera cp`
#       quick: tests + the nell-2-shaped benchmarks;  full: also the CPU tests and more benches
#       amazon: build, then MTTKRP and CP-ALS on tensors of the amazon-reviews shape
#               (1.74e9 nonzeros, generated on the GPU), uniform and power-law, R = 32, float
#       scaling: build, then CP-ALS on the amazon shape (power-law) on 1, 2, 4, ... GPUs of
#               the node (one MPI rank per GPU, NCCL), strong scaling
#       Several modes may be given: jobs/gpu-node.sh tests quick amazon
#
# Environment: OUT (results folder, default build-gpu/results), TESSERA_DEPS (default .deps).
# NCCL_NVLS_ENABLE stays 0: NVLink multicast can take a shared node's GPUs out of service.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
modes=${*:-quick}
has() { case " $modes " in *" $1 "*) return 0;; esac; return 1; }
deps=${TESSERA_DEPS:-$here/.deps}
build=$here/build-gpu
out=${OUT:-$build/results}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_WAIT_POLICY=PASSIVE
log() { echo "[gpu-node $(date +%H:%M:%S)] $*"; }

# ---- carried packages into a private prefix (never into /) ----
prefix=${TMPDIR:-/tmp}/tessera-prefix
mkdir -p "$prefix"
if ls "$deps"/*.deb >/dev/null 2>&1; then
  for f in "$deps"/*.deb; do dpkg -x "$f" "$prefix"; done
fi
lib=$prefix/usr/lib/x86_64-linux-gnu
mkdir -p "$lib"
[ -e "$lib/lapack/liblapack.so.3" ] && ln -sf lapack/liblapack.so.3 "$lib/liblapack.so"
[ -e "$lib/blas/libblas.so.3" ] && ln -sf blas/libblas.so.3 "$lib/libblas.so"
sysz=$(ls /lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libz.so.1 2>/dev/null | head -1)
[ -n "$sysz" ] && ln -sf "$sysz" "$lib/libz.so"
export LD_LIBRARY_PATH=$lib:$lib/lapack:$lib/blas:${LD_LIBRARY_PATH:-}
export CMAKE_PREFIX_PATH=$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
export CPATH=$prefix/usr/include${CPATH:+:$CPATH}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpus.txt"
ngpu=$(nvidia-smi -L | wc -l)

# ---- build ----
log "configure"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_LIBRARY_PATH="$lib" -DCMAKE_INCLUDE_PATH="$prefix/usr/include" \
  -DZLIB_INCLUDE_DIR="$prefix/usr/include" >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
grep -E "^-- +(CUDA|NCCL|MPI|HDF5|LAPACK)" "$out/configure.log"
log "build"
cmake --build "$build" -j "$(nproc)" >"$out/build.log" 2>&1 || { grep -E "error|FAILED" -A5 "$out/build.log" | head -60; exit 1; }
T=$build/drivers/tessera

summary=$out/summary.txt
: >"$summary"
bench() {  # name, args...
  local name=$1; shift
  log "bench $name"
  "$@" --json "$out/$name.json" 2>&1 | tee "$out/$name.log" | tail -8
  python3 - "$out/$name.json" "$name" >>"$summary" <<'PY' || echo "$name: no result" >>"$summary"
import json, sys
j = json.load(open(sys.argv[1])); n = sys.argv[2]
if "modes" in j:
    print(f"{n:34s} mean {j['mean_seconds_per_mode']*1e3:9.3f} ms/mode  ratio-to-floor {j['mean_ratio_to_floor']:5.2f}  "
          f"no-reuse {j.get('mean_ratio_to_noreuse_floor', float('nan')):5.2f}  bw {j['machine']['bandwidth_bytes_per_s']/1e9:7.1f} GB/s")
else:
    s = j["share"]
    t2 = j.get("tier2")
    extra = f"  tier2 copy {t2['copy_seconds_per_iteration']*1e3:.1f} ms compute {t2['compute_seconds_per_iteration']*1e3:.1f} ms ratio {t2['ratio_to_max_copy_compute']:.2f}" if t2 else ""
    print(f"{n:34s} {j['seconds_per_iteration']*1e3:9.3f} ms/iter   kernel {s['kernel']*100:4.1f}%  comm {s['comm']*100:4.1f}%  solve {s['solve']*100:4.1f}%  floor-ratio {j['ratio_to_floor']:.2f}{extra}")
PY
}
nell=12092x9184x28818
amz=4821207x1774269x1805187

# ---- tests ----
if has tests || has quick || has full; then
log "GPU tests"
(cd "$build" && NCCL_DEBUG=${NCCL_DEBUG:-WARN} ctest -L gpu --output-on-failure --timeout 600) 2>&1 |
  tee "$out/ctest-gpu.log" | grep -E "Test +#|tests passed|FAILED|Failure|error|NCCL WARN" | head -40

# ---- end to end: the driver on the GPUs vs the CPU backend ----
log "tessera cp end to end ($ngpu GPU(s))"
np=$(( ngpu >= 2 ? 2 : 1 ))
mpirun -np $np "$T" generate --dims 2000x1500x1000 --nnz 2e6 --rank 10 --noise 0.05 \
  --dist powerlaw --out "$build/e2e.tns" | tail -1
for s in allreduce layer; do
  mpirun -np $np "$T" cp "$build/e2e.tns" --rank 10 --iters 10 --tol 0 --backend cuda --comm-strategy $s \
    --json "$out/e2e-cuda-$s.json" | tail -2
  mpirun -np $np "$T" cp "$build/e2e.tns" --rank 10 --iters 10 --tol 0 --backend cpu --threads 4 --comm-strategy $s \
    --json "$out/e2e-cpu-$s.json" | tail -1
done
fi
if has full; then
  log "CPU tests"
  (cd "$build" && ctest -LE gpu -j 8 --timeout 900) 2>&1 | tee "$out/ctest-cpu.log" | tail -8
fi

# ---- benchmarks ----
if has quick || has full || has quick-bench; then
  bench nell2-uniform-mttkrp-r32 "$T" bench mttkrp --generate $nell --nnz 76.9e6 --rank 32 --backend cuda --precision float --repeat 10
  bench nell2-uniform-mttkrp-r32-auto env TESSERA_CUDA_LAYOUT=auto "$T" bench mttkrp --generate $nell --nnz 76.9e6 --rank 32 --backend cuda --precision float --repeat 10
  bench nell2-powerlaw-mttkrp-r32 "$T" bench mttkrp --generate $nell --nnz 76.9e6 --dist powerlaw --rank 32 --backend cuda --precision float --repeat 10
  bench nell2-uniform-mttkrp-r16 "$T" bench mttkrp --generate $nell --nnz 76.9e6 --rank 16 --backend cuda --precision float --repeat 10
  bench nell2-uniform-cp-r32 "$T" bench cp --generate $nell --nnz 76.9e6 --rank 32 --backend cuda --precision float --iters 6
  bench nell2-uniform-cp-r32-tier2 "$T" bench cp --generate $nell --nnz 76.9e6 --rank 32 --backend cuda --precision float --iters 6 --mem-budget 1G
fi
if has full; then
  C=../shared/data/congress-cosponsor_leg-leg-year.tns.gz
  [ -f "$C" ] && bench congress-cpu-cp-r16 "$T" bench cp "$C" --rank 16 --backend cpu --iters 10
fi
if has amazon; then
  for dist in uniform powerlaw; do
    bench amazon-$dist-mttkrp-r32 "$T" bench mttkrp --generate $amz --nnz 1.74e9 --dist $dist --rank 32 \
      --backend cuda --precision float --repeat 3
  done
  bench amazon-uniform-mttkrp-r32-auto env TESSERA_CUDA_LAYOUT=auto "$T" bench mttkrp --generate $amz --nnz 1.74e9 \
    --rank 32 --backend cuda --precision float --repeat 3
  bench amazon-powerlaw-mttkrp-r16 "$T" bench mttkrp --generate $amz --nnz 1.74e9 --dist powerlaw --rank 16 \
    --backend cuda --precision float --repeat 3
  bench amazon-powerlaw-cp-r32 "$T" bench cp --generate $amz --nnz 1.74e9 --dist powerlaw --rank 32 \
    --backend cuda --precision float --iters 5
fi
if has scaling; then
  p=1
  while [ $p -le "$ngpu" ]; do
    bench amazon-powerlaw-cp-r32-np$p mpirun -np $p --bind-to none "$T" bench cp --generate $amz --nnz 1.74e9 \
      --dist powerlaw --rank 32 --backend cuda --precision float --iters 5
    p=$((p * 2))
  done
fi
echo
echo "==== summary ($(nvidia-smi -L | head -1 | cut -c1-40), $ngpu GPU(s), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)) ===="
cat "$summary"

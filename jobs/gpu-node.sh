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
#       scale: issue 36's strong scaling on 1, 2, 4, ... GPUs of the node: the NCCL floor
#               (bench comm), congress R16 (tessera cp; data beside the checkout or in
#               .deps/data), the nell-2 shape R32 (both strategies) and the amazon shape R32
#               (TESSERA_SCALE_NO_AMAZON=1: not), Tucker nell-2 16,16,16 (on 2+ GPUs also
#               with --comm-strategy owners beside auto's all-reduced rows) and SpTC generated
#               (TESSERA_SCALE_NO_TUCKER_SPTC=1: not); with TESSERA_SCALE_LAYER_AMAZON=1 also
#               the amazon shape with --comm-strategy layer and with --deal (docs/multi-gpu.md,
#               "Dealt grids"), TESSERA_SCALE_STORE=1 the amazon
#               shape from an HDF5 store generated on the node (stored order dealt to the ranks
#               and, for comparison, cut in contiguous ranges: TESSERA_SCALE_STORE_READ; on the
#               GPU counts in TESSERA_SCALE_STORE_NPS, default all; TESSERA_SCALE_STORE_DEAL=1:
#               also with --deal),
#               TESSERA_SCALE_REDDIT=1 the reddit shape (4.7e9 nonzeros) on all GPUs,
#               TESSERA_SCALE_TUCKER_AMAZON=1 Tucker on the amazon shape,
#               TESSERA_SCALE_OVERLAP=1 the amazon shape also with --comm-overlap on (2+ GPUs),
#               TESSERA_SCALE_TUCKER_SUBSPACE=1 Tucker nell-2 with --svd subspace; TESSERA_SCALE_ONLY="w .."
#               runs only the cases whose names contain one of the words; a table of
#               ms/iter, speedup over one GPU, kernel and comm per iteration, comm over its
#               floor and kernel time max/mean over the ranks (jobs/scale_table.py)
#       tucker: build, the TTMc/Tucker GPU tests, then bench ttmc and bench tucker on the
#               nell-2 shape (ranks 16,16,16) and a 4-mode tensor of 500M nonzeros
#       tucker-amazon: bench ttmc and bench tucker on the amazon shape (ranks 16,16,16), the
#               latter on 1, 2, 4, ... GPUs
#       contract: the SpTC GPU tests and bench contract on a generated 3-mode x 3-mode
#               contraction of 1.2e9 products (against the reference backend)
#       tier3: the tier-3 GPU test, then CP-ALS rank 32 on a generated amazon-shaped HDF5 store
#               (TESSERA_TIER3_NNZ, default 1e9; TESSERA_TIER3_NP ranks) streamed from disk
#               (--host-budget TESSERA_TIER3_BUDGET, default 8G), and the same file in tier 1
#       contract-scaling: the distributed SpTC tests, then bench contract (generated, 1.2e9
#               products; congress) on 1, 2, 4, ... GPUs of the node
#       planner: the memory planner on this node (issue 16): an amazon-shaped HDF5 store
#               (TESSERA_PLAN_NNZ, default 1.74e9; power-law, float32, unique coordinates)
#               generated on the node, `tessera plan` of it, then CP-ALS rank 32 with the
#               plan and each tier in TESSERA_PLAN_TIERS (default "auto 2 3"), and
#               with --device-budget 40G (TESSERA_PLAN_SKIP_40G=1: not), tier 3 per
#               TESSERA_PLAN_READ_AHEAD and TESSERA_PLAN_READ_CACHE (keep | drop, e.g.
#               "keep drop"); every run prints time per iteration next to its
#               floor and its measured peak memory next to the plan. The store is kept for
#               the next call on the same machine (TESSERA_SCRATCH, default build-gpu/scratch)
#       sanitize: the GPU test binaries under compute-sanitizer, memcheck then racecheck
#               (TESSERA_SANITIZE_TOOLS, default "memcheck racecheck"; binaries matching
#               TESSERA_SANITIZE_R, default all gpu_*_tests; TESSERA_SANITIZE_GTEST: a
#               --gtest_filter, e.g. for racecheck, which is slow; TESSERA_SANITIZE_ARGS: more
#               compute-sanitizer options, e.g. --kernel-name kns=top_eigenpairs_kernel); a line per binary and tool with
#               the errors found; any error fails the mode
#       python: congress CP-ALS (rank 16, 20 iterations, float, cuda) through the Python module
#               and through the CLI, seconds per iteration (median of iterations 2..20) and
#               their ratio (issue 19: within 10%)
#       study: jobs/study.py on TESSERA_STUDY (default jobs/studies/gpu-1.toml), locally, into
#               $OUT/study (table, CSV, plots); issue 36's scaling study is
#               jobs/studies/gpu-scaling-2.toml (1-2 GPUs) or gpu-scaling-4.toml (1, 2, 4)
#       constrained: bench cp on the nell-2 shape (generated on the host, float, cuda, rank
#               TESSERA_CON_RANK, default 32): plain, --nonneg, --nonneg with L1/L2, and
#               --observed-only --holdout 0.1, each next to plain CP (issue 23)
#       latency: iteration latency (issue 21; docs/perf/gpu-h100-latency.md): CP-ALS on congress
#               (R 16 and 32, 26 iterations, median of 2..26; needs the data beside the checkout
#               or in .deps/data) and on the nell-2 shape (R 32), each with --cuda-graph on and
#               off; MTTKRP nell-2 R 32 per mode (achieved GB/s next to the floor; with ncu
#               on the node, its DRAM bytes and L2 hit rate per kernel); Tucker nell-2
#               16,16,16; TTMc nell-2 16,16,16; SpTC generated (1.2e9 products, double; the
#               issue 17 set). With TESSERA_BASE_TAR (a `git archive --format=tar.gz` of an earlier
#               commit, carried e.g. in .deps/) the same cases on that build too, so before
#               and after come from one card in one call
#       tc: the tensor-core MTTKRP (issue 18): its GPU test, then bench mttkrp --tc-sweep on
#               generated blocky tensors (float: off/3xtf32/tf32/bf16/auto, double: off/fp64/
#               auto; TESSERA_TC_NNZ nonzeros, default 2e7), on the real tensors with dense
#               regions (aminoacid, kripke, congress: beside the checkout or in .deps/data)
#               and on the nell-2 shape, and the PNG plots (jobs/plot-tc-sweep.py);
#               TESSERA_TC_PRECISIONS (default "float double"), TESSERA_TC_NO_NELL=1,
#               TESSERA_TC_NO_REAL=1 leave parts out
#       floors: issue 43's single-GPU distances to the floor (MTTKRP nell-2 R32, CP, completion
#               R16/R32 next to plain CP on the same host-generated tensor, Tucker nell-2
#               16,16,16 and 8,8,8 and its TTMc (uniform and power-law), aminoacid R256 and kripke
#               MTTKRP, Tucker fb15k-237 8,8,8 and 16,16,16 for 40 iterations (the fit; data
#               beside the checkout or in .deps/data)); with TESSERA_BASE_TAR the same on
#               that commit's build too (before and after in one call; the base runs first,
#               the new build first with TESSERA_FLOORS_NEW_FIRST=1); TESSERA_FLOORS_ONLY="w .."
#               runs only the cases whose names contain one of the words; jobs/floors_table.py
#       counts: issue 39's CP-APR (bench cp --loss poisson; 10 and 1 inner iterations) next to
#               CP-ALS on the nell-2 shape (host-generated) and congress, R 32, per
#               TESSERA_COUNTS_PRECISIONS (default float); with TESSERA_BASE_TAR the same on
#               that commit's build too (docs/perf/gpu-h200-cp-apr.md)
#       gcp: issue 39's GCP-SGD epoch (bench cp --solver gcp, 100 steps of 5e5 nonzero and 5e5
#               zero samples: 1e8 sampled entries) on the nell-2 shape, R 32, float, gaussian and
#               poisson, against its floor; with TESSERA_BASE_TAR the same on that commit's build
#       counts-np: issue 39's speed at 1, 2, 4 .. GPUs (up to the GPUs present): the GCP epoch
#               (gaussian, poisson; 1e8 sampled entries), CP-APR (10 inner iterations) and CP-ALS
#               per iteration on the nell-2 shape (host-generated) and congress, R 32, float
#       emulated: issue 38's emulated nodes (2 or more GPUs): jobs/emulated-nodes.sh (the NCCL
#               floor between emulated nodes, CP-ALS amazon shape with both strategies, flat and
#               composed collectives, against tessera plan --nodes; TESSERA_EMU_* settings)
#       eig: cuSOLVER's symmetric eigen-solvers, session 23's one-cluster reduction and the
#               library's one-block solver (float Tucker, n <= 256) timed on one n x n Gram,
#               n = 64 .. 1024 (issue 43's Tucker dense stage;
#               jobs/probes/eig_probe.cu, compiled here with nvcc); with TESSERA_BASE_TAR (or
#               TESSERA_EIG_BASE_TAR, for this mode only) the one-block solver of that commit
#               (and its Lanczos kernel, where it has one)
#               too, in the same call; then the one-block Lanczos kernel beside the exact
#               solver on matrices of known spectra (jobs/probes/lanczos_probe.cu)
#       mttkrp-tile: issue 43's shared-memory tiled MTTKRP probe (jobs/probes/mttkrp_tile_probe.cu,
#               compiled here with nvcc) on the nell-2 shape, R 32, beside bench mttkrp (float
#               and fp16 gathers) on the same shape (TESSERA_TARGETS=tessera builds only that)
#       shared: the multi-rank code on fewer GPUs than ranks (TESSERA_SHARE_GPU=1; docs/multi-gpu.md,
#               "Several ranks on one GPU"): the multi-rank GPU tests (TESSERA_CTEST_R, default
#               "_np2|_np4"), then tessera tucker fb15k-237 16,16,16 on 1, 2 and 4 ranks
#               (TESSERA_SHARED_NPS), fits side by side; correctness, not speed
#       ctest: the GPU tests matching TESSERA_CTEST_R (with TESSERA_SHARE_GPU=1 the multi-rank
#               ones, e.g. TESSERA_CTEST_R="_np2|_np4", run on fewer GPUs than ranks:
#               docs/multi-gpu.md, "Several ranks on one GPU");  mttkrp-ab: MTTKRP classic vs blocked kernel
#       tier2: memory tier 2 through the CP device loop (issue 36): the tier-2 and device-loop
#               GPU tests, then a generated nell-2-shaped HDF5 store (TESSERA_TIER2_NNZ, default
#               76.9e6, uniform, float32) in `tessera cp --tier 2` (rank 32, float) with
#               --cuda-graph on (the chunks' copies, sorts and kernels in the iteration's graph)
#               and off (per-operation calls), and in tier 1; per run the engine and the mean
#               of iterations 3.. (after the capture) next to the host link's floor; then
#               bench cp of the same shape under --device-budget 6G (the backend's own
#               streamed format) with --cuda-graph on and off
#       Several modes may be given: jobs/gpu-node.sh tests quick amazon
#
# Environment: OUT (results folder, default build-gpu/results), TESSERA_DEPS (default .deps),
# TESSERA_GPU_BUILD (build folder, default build-gpu),
# TESSERA_TARGETS (build only these targets, e.g. "tessera gpu_ttmc_tests"; default all),
# TESSERA_CMAKE_ARGS (extra configure arguments, e.g. tuning defines), TESSERA_WERROR (warnings
# are errors, default ON).
# NCCL_NVLS_ENABLE stays 0: NVLink multicast can take a shared node's GPUs out of service.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
modes=${*:-quick}
has() { case " $modes " in *" $1 "*) return 0;; esac; return 1; }
deps=${TESSERA_DEPS:-$here/.deps}
build=${TESSERA_GPU_BUILD:-$here/build-gpu}
out=${OUT:-$build/results}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_WAIT_POLICY=PASSIVE
# Host BLAS on small matrices (Tucker's eigen-solves and CholeskyQR): a few threads beat
# all of a node's cores (docs/perf/gpu-h200-tucker.md).
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-4}
log() { echo "[gpu-node $(date +%H:%M:%S)] $*"; }
# The folder (absolute) holding real tensor $1: TESSERA_DATA, ../shared/data beside the
# checkout, or a copy carried in .deps/data (ignored); nothing when none has it.
data_dir() {
  local d
  for d in ${TESSERA_DATA:-} ../shared/data .deps/data; do
    [ -f "$d/$1" ] && { (cd "$d" && pwd); return; }
  done
}

# ---- carried packages into a private prefix (never into /) ----
# shellcheck source=jobs/node-env.sh
source "$here/jobs/node-env.sh"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpus.txt"
ngpu=$(nvidia-smi -L | wc -l)

# ---- build ----
log "configure"
# Warnings are errors (host code and nvcc, as in CI; TESSERA_WERROR=OFF: not).
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_LIBRARY_PATH="$lib" -DCMAKE_INCLUDE_PATH="$prefix/usr/include" \
  -DZLIB_INCLUDE_DIR="$prefix/usr/include" -DTESSERA_WERROR="${TESSERA_WERROR:-ON}" \
  ${TESSERA_CMAKE_ARGS:-} >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
grep -E "^-- +(CUDA|NCCL|MPI|HDF5|LAPACK)" "$out/configure.log"
log "build"
cmake --build "$build" -j "$(nproc)" ${TESSERA_TARGETS:+--target $TESSERA_TARGETS} >"$out/build.log" 2>&1 || { grep -E "error|FAILED" -A5 "$out/build.log" | head -60; exit 1; }
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
elif "runs" in j:
    r = j["runs"]
    print(f"{n:34s} {r[0]['backend']}: {r[0]['products']:.3g} products, {r[0]['products_per_s_kernel']:.3g} products/s (kernel), "
          f"{r[0]['total_seconds']:.3f} s total ({r[0].get('host_buffers', '?')} host buffers"
          + (f", {j['host_link_floor']['total_ratio']:.2f}x the host link floor" if "host_link_floor" in j else "") + "); "
          + ", ".join(f"{x['backend']} x{x['speedup_of_benchmarked_backend']:.1f} slower" for x in r[1:]))
elif j.get("command") == "bench comm":
    print(f"{n:34s} " + ", ".join(f"{s['op']} peak busbw {s['peak_busbw_bytes_per_s']/1e9:.1f} GB/s" for s in j.get("summary", [])))
elif j.get("command") in ("cp", "tucker"):
    t = j["memory_tier"]; its = [x["seconds"] for x in j["per_iteration"]]; n_it = max(len(its), 1)
    it_s = sum(its) / n_it; rd = t["copy_seconds"] / n_it; cp = t["compute_seconds"] / n_it
    fl = t.get("floor", {}).get("seconds_per_iteration", 0.0)
    m = j.get("memory_plan", {})
    mem = ""
    if m:
        mem = (f"  host {m['measured_peak_host_bytes']/1e9:.1f}/{m['planned_peak_host_bytes']/1e9:.1f} GB"
               + (f"  dev {m.get('measured_peak_device_bytes', 0)/1e9:.1f}/{m['planned_peak_device_bytes']/1e9:.1f} GB" if m.get('backend') == 'cuda' else "")
               + " (measured/planned)")
    ratio = f"{it_s / max(fl, cp):5.2f}" if t['tier'] >= 2 and max(fl, cp) > 0 else "    -"
    print(f"{n:34s} tier {t['tier']}  {it_s:8.3f} s/iter  copy|read {rd:7.3f} s  compute {cp:7.3f} s  floor {fl:7.3f} s  "
          f"ratio-to-max(floor,compute) {ratio}  hidden {t['overlap_fraction']*100:3.0f}%  "
          f"load {j['phases_seconds']['io']:.1f} s  fit {j['fit']:.5f}{mem}")
elif "tc_sweep" in j:
    rows = j["tc_sweep"]["rows"]
    worst = max((r["t_auto_seconds"] / r["t_off_seconds"] for r in rows if r.get("t_auto_seconds")), default=float("nan"))
    best = {}
    for r in rows:
        if r["precision"] != "off" and r.get("t_tc_seconds"):
            best[r["precision"]] = max(best.get(r["precision"], 0), r["t_off_seconds"] / r["t_tc_seconds"])
    print(f"{n:34s} {len(rows)} rows; best speedup per mode " + ", ".join(f"{p} {v:.2f}x" for p, v in sorted(best.items()))
          + f"; worst auto/off {worst:.3f}")
elif "phi_pass_seconds" in j:
    s = j["share"]
    print(f"{n:34s} {j['seconds_per_iteration']*1e3:9.3f} ms/iter   inner {j['inner_iterations_per_iteration']:4.1f}  phi pass {j['phi_pass_seconds']*1e3:8.3f} ms  "
          f"floor-ratio {j['phi_pass_ratio_to_floor']:.2f}  kernel {s['kernel']*100:4.1f}%  loglik {j['loglik']:.6e}")
elif "samples_per_epoch" in j:
    s = j["share"]
    ratio = f"floor-ratio {j['epoch_ratio_to_floor']:.2f}" if "epoch_ratio_to_floor" in j else "floor -"
    print(f"{n:34s} {j['seconds_per_epoch']*1e3:9.1f} ms/epoch  {j['samples_per_second']:.3g} samples/s  {ratio}  "
          f"kernel {s['kernel']*100:4.1f}%  comm {s['comm']*100:4.1f}%  loss {j['loss_estimate']:.6e}")
elif "ttmc" in j.get("share", {}):
    s = j["share"]
    print(f"{n:34s} {j['seconds_per_iteration']*1e3:9.3f} ms/iter   ttmc {s['ttmc']*100:4.1f}%  comm {s['comm']*100:4.1f}%  svd {s['svd']*100:4.1f}%  floor-ratio {j['ratio_to_floor']:.2f}  fit {j['fit']:.4f}")
else:
    s = j["share"]
    t2 = j.get("tier2")
    extra = f"  tier2 copy {t2['copy_seconds_per_iteration']*1e3:.1f} ms compute {t2['compute_seconds_per_iteration']*1e3:.1f} ms ratio {t2['ratio_to_max_copy_compute']:.2f}" if t2 else ""
    print(f"{n:34s} {j['seconds_per_iteration']*1e3:9.3f} ms/iter   kernel {s['kernel']*100:4.1f}%  comm {s['comm']*100:4.1f}%  solve {s['solve']*100:4.1f}%  floor-ratio {j['ratio_to_floor']:.2f}{extra}")
PY
}
# The `tessera` of TESSERA_BASE_TAR (a `git archive --format=tar.gz` of an earlier commit) in
# build-base, built once per machine: prints its path, or fails (no tar, or the build failed).
build_base() {
  local bin=$here/build-base/drivers/tessera
  [ -n "${TESSERA_BASE_TAR:-}" ] && [ -f "$TESSERA_BASE_TAR" ] || return 1
  if [ ! -x "$bin" ]; then
    log "build the base commit (target tessera)" >&2
    rm -rf "$here/build-base-src" && mkdir -p "$here/build-base-src" &&
      tar -xzf "$TESSERA_BASE_TAR" -C "$here/build-base-src" &&
      cmake -S "$here/build-base-src" -B "$here/build-base" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DTESSERA_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_LIBRARY_PATH="$lib" \
        -DCMAKE_INCLUDE_PATH="$prefix/usr/include" -DZLIB_INCLUDE_DIR="$prefix/usr/include" \
        -DTESSERA_BUILD_TESTS=OFF >"$out/configure-base.log" 2>&1 &&
      cmake --build "$here/build-base" -j "$(nproc)" --target tessera >"$out/build-base.log" 2>&1 ||
      { log "base build failed (see $out/build-base.log)" >&2; return 1; }
  fi
  echo "$bin"
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
if has ctest; then  # only the GPU tests matching TESSERA_CTEST_R (with TESSERA_TARGETS builds)
  log "GPU tests matching ${TESSERA_CTEST_R:-gpu}"
  (cd "$build" && ctest -L gpu -R "${TESSERA_CTEST_R:-gpu}" --output-on-failure --timeout 600) 2>&1 |
    tee "$out/ctest-gpu.log" | grep -E "Test +#|tests passed|FAILED|Failure|error" | head -40
fi
if has sanitize; then  # compute-sanitizer over the GPU test binaries
  cs=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
  bad=0
  for tool in ${TESSERA_SANITIZE_TOOLS:-memcheck racecheck}; do
    for b in "$build"/tests/gpu_*_tests; do
      name=$(basename "$b")
      [[ "$name" =~ ${TESSERA_SANITIZE_R:-.} ]] || continue
      start=$(date +%s)
      # API errors are not reported: NCCL probes cudaFuncGetAttributes for kernels not built
      # for this GPU (error 209) on purpose, and Tessera checks every CUDA call it makes
      # itself (TESSERA_CUDA_CHECK throws); memory and race errors are all reported.
      timeout "${TESSERA_SANITIZE_TIMEOUT:-300}" "$cs" --tool "$tool" --error-exitcode 99 \
        --report-api-errors no --print-limit 20 ${TESSERA_SANITIZE_ARGS:-} "$b" ${TESSERA_SANITIZE_GTEST:+--gtest_filter="$TESSERA_SANITIZE_GTEST"} \
        >"$out/sanitize-$tool-$name.log" 2>&1
      rc=$?
      errs=$(grep -oE "(ERROR SUMMARY: |hazards displayed \()[0-9]+" "$out/sanitize-$tool-$name.log" |
        tail -1 | grep -oE "[0-9]+$")
      tests=$(grep -oE "\[  PASSED  \] [0-9]+ tests?" "$out/sanitize-$tool-$name.log" | grep -oE "[0-9]+")
      state=clean
      [ "$rc" = 124 ] && state=timeout
      [ "$rc" = 99 ] && { state=ERRORS; bad=1; }
      [ "$rc" != 0 ] && [ "$rc" != 99 ] && [ "$rc" != 124 ] && { state="rc=$rc"; bad=1; }
      line=$(printf "sanitize %-10s %-28s %-8s errors %-4s gtest-passed %-4s %4ss" "$tool" "$name" \
        "$state" "${errs:-?}" "${tests:-?}" "$(( $(date +%s) - start ))")
      echo "$line" | tee -a "$summary"
      [ "$state" = clean ] || grep -E "=========" "$out/sanitize-$tool-$name.log" | head -20
    done
  done
  [ "$bad" = 0 ] || log "compute-sanitizer found errors (see $out/sanitize-*.log)"
fi
if has mttkrp-ab; then  # MTTKRP tile kernels A/B: classic vs blocked (--mttkrp-kernel)
  for k in classic blocked; do
    for R in 32 16; do
      bench nell2-uniform-mttkrp-r$R-$k "$T" bench mttkrp --mttkrp-kernel $k --generate $nell \
        --nnz 76.9e6 --rank $R --backend cuda --precision float --repeat 10
    done
    bench nell2-powerlaw-mttkrp-r32-$k "$T" bench mttkrp --mttkrp-kernel $k --generate $nell \
      --nnz 76.9e6 --dist powerlaw --rank 32 --backend cuda --precision float --repeat 10
  done
  for k in ${TESSERA_AB_AMAZON:-blocked}; do
    bench amazon-powerlaw-mttkrp-r32-$k "$T" bench mttkrp --mttkrp-kernel $k --generate $amz \
      --nnz 1.74e9 --dist powerlaw --rank 32 --backend cuda --precision float --repeat 3
  done
fi
if has full; then
  log "CPU tests"
  (cd "$build" && ctest -LE gpu -j 8 --timeout 900) 2>&1 | tee "$out/ctest-cpu.log" | tail -8
fi

# ---- benchmarks ----
if has quick || has full || has quick-bench; then
  bench nell2-uniform-mttkrp-r32 "$T" bench mttkrp --generate $nell --nnz 76.9e6 --rank 32 --backend cuda --precision float --repeat 10
  bench nell2-uniform-mttkrp-r32-auto "$T" bench mttkrp --cuda-layout auto --generate $nell --nnz 76.9e6 --rank 32 --backend cuda --precision float --repeat 10
  bench nell2-powerlaw-mttkrp-r32 "$T" bench mttkrp --generate $nell --nnz 76.9e6 --dist powerlaw --rank 32 --backend cuda --precision float --repeat 10
  bench nell2-uniform-mttkrp-r16 "$T" bench mttkrp --generate $nell --nnz 76.9e6 --rank 16 --backend cuda --precision float --repeat 10
  bench nell2-uniform-cp-r32 "$T" bench cp --generate $nell --nnz 76.9e6 --rank 32 --backend cuda --precision float --iters 6
  bench nell2-uniform-cp-r32-tier2 "$T" bench cp --generate $nell --nnz 76.9e6 --rank 32 --backend cuda --precision float --iters 6 --device-budget 6G
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
  bench amazon-uniform-mttkrp-r32-auto "$T" bench mttkrp --cuda-layout auto --generate $amz --nnz 1.74e9 \
    --rank 32 --backend cuda --precision float --repeat 3
  bench amazon-powerlaw-mttkrp-r16 "$T" bench mttkrp --generate $amz --nnz 1.74e9 --dist powerlaw --rank 16 \
    --backend cuda --precision float --repeat 3
  bench amazon-powerlaw-cp-r32 "$T" bench cp --generate $amz --nnz 1.74e9 --dist powerlaw --rank 32 \
    --backend cuda --precision float --iters 5
fi
if has tucker; then
  log "TTMc / Tucker GPU tests"
  (cd "$build" && ctest -R "gpu_ttmc|gpu_tucker" --output-on-failure --timeout 600) 2>&1 |
    tee "$out/ctest-tucker.log" | grep -E "Test +#|tests passed|FAILED|Failure|error" | head -20
  for dist in uniform powerlaw; do
    bench nell2-$dist-ttmc-16 "$T" bench ttmc --generate $nell --nnz 76.9e6 --dist $dist --ranks 16,16,16 \
      --backend cuda --precision float --repeat 10
  done
  for tile in 512 2048; do  # TTMc tile size (tuning; the default is 1024)
    bench nell2-uniform-ttmc-16-tile$tile "$T" bench ttmc --ttmc-tile $tile --generate $nell \
      --nnz 76.9e6 --ranks 16,16,16 --backend cuda --precision float --repeat 10
  done
  for th in 1 16; do  # host BLAS threads of the dense stages (default 4)
    bench nell2-uniform-tucker-16-gram-blas$th env OPENBLAS_NUM_THREADS=$th "$T" bench tucker --generate $nell \
      --nnz 76.9e6 --ranks 16,16,16 --backend cuda --precision float --iters 6
  done
  for svd in gram subspace; do
    bench nell2-uniform-tucker-16-$svd "$T" bench tucker --generate $nell --nnz 76.9e6 --ranks 16,16,16 \
      --backend cuda --precision float --iters 6 --svd $svd
  done
  bench 4mode-500m-ttmc-8 "$T" bench ttmc --generate 200000x100000x50000x1000 --nnz 5e8 --ranks 8,8,8,8 \
    --backend cuda --precision float --repeat 5
  bench 4mode-500m-tucker-8 "$T" bench tucker --generate 200000x100000x50000x1000 --nnz 5e8 \
    --ranks 8,8,8,8 --backend cuda --precision float --iters 4
fi
if has tucker-amazon; then
  bench amazon-powerlaw-ttmc-16 "$T" bench ttmc --generate $amz --nnz 1.74e9 --dist powerlaw --ranks 16,16,16 \
    --backend cuda --precision float --repeat 3
  p=1
  while [ $p -le "$ngpu" ]; do
    bench amazon-powerlaw-tucker-16-np$p mpirun -np $p --bind-to none "$T" bench tucker --generate $amz \
      --nnz 1.74e9 --dist powerlaw --ranks 16,16,16 --backend cuda --precision float --iters 3
    p=$((p * 2))
  done
fi
if has contract-scaling; then  # distributed SpTC: 1, 2, 4, ... GPUs (NCCL, routed on the device)
  log "SpTC GPU tests (distributed)"
  (cd "$build" && ctest -R "gpu_contract_nccl|gpu_sptc" --output-on-failure --timeout 900) 2>&1 |
    tee "$out/ctest-contract.log" | grep -E "Test +#|tests passed|FAILED|Failure|error" | head -20
  cdata=$(data_dir congress-cosponsor_leg-leg-year.tns.gz)
  p=1
  while [ $p -le "$ngpu" ]; do
    bench contract-gen-1e9-np$p mpirun -np $p --bind-to none "$T" bench contract --generate --nnz 2e7 \
      --products 1.2e9 --backend cuda --precision double --repeat 3 --no-reference
    [ -n "${cdata:-}" ] && bench contract-congress-np$p mpirun -np $p --bind-to none "$T" bench contract \
      "$cdata/congress-cosponsor_leg-leg-year.tns.gz" "$cdata/congress-cosponsor_leg-leg-year.tns.gz" \
      --einsum "ijy,kjy->ik" --backend cuda --precision double --repeat 3 --no-reference
    p=$((p * 2))
  done
fi
if has contract; then
  log "SpTC GPU tests"
  (cd "$build" && ctest -R "gpu_sptc" --output-on-failure --timeout 900) 2>&1 |
    tee "$out/ctest-sptc.log" | grep -E "Test +#|tests passed|FAILED|Failure|error" | head -40
  bench contract-gen-1e9 "$T" bench contract --generate --nnz 2e7 --products 1.2e9 --backend cuda \
    --precision double --repeat 3 --no-reference
  bench contract-gen-1e9-sortasm "$T" bench contract --generate --nnz 2e7 --products 1.2e9 --backend cuda \
    --precision double --repeat 3 --no-reference --assembly sort
  bench contract-gen-1e8 "$T" bench contract --generate --nnz 5e6 --products 1e8 --backend cuda \
    --precision double --repeat 3 --compare-cpu
  # Tensor-core threshold: blocky inputs of rising block density, sparse vs tensor cores.
  log "tensor-core sweep"
  "$T" bench contract --tc-sweep --backend cuda --precision double --nnz 2e6 --products 2e8 --block-size 16 \
    --repeat 3 --json "$out/tc-sweep-double.json" 2>&1 | tee "$out/tc-sweep-double.log" | tail -25
  "$T" bench contract --tc-sweep --backend cuda --precision float --nnz 2e6 --products 2e8 --block-size 16 \
    --repeat 3 --json "$out/tc-sweep-float.json" 2>&1 | tee "$out/tc-sweep-float.log" | tail -25
  # Real tensors: ../shared/data beside a checkout, or a copy carried in .deps/data (ignored).
  data=$(data_dir congress-cosponsor_leg-leg-year.tns.gz)
  if [ -n "${data:-}" ]; then
    C=$data/congress-cosponsor_leg-leg-year.tns.gz
    bench contract-congress "$T" bench contract "$C" "$C" --einsum "ijy,kjy->ik" --backend cuda \
      --precision double --repeat 3
    M=$data/tags-math-sx_tag-tag-tag-month.tns.gz
    [ -f "$M" ] && bench contract-tags-math "$T" bench contract "$M" "$M" --einsum "ijkt,jklt->il" --extend-dims \
      --backend cuda --precision double --repeat 3
  else
    log "congress not found (../shared/data or .deps/data): skipped"
  fi
fi
if has tier3; then
  # Memory tier 3: a generated amazon-shaped tensor (TESSERA_TIER3_NNZ nonzeros, power-law,
  # float32 values) written to HDF5 by all cores, then CP-ALS on this node's GPUs with a host
  # budget that forces streaming from disk; the same file in tiers 1-2 for the compute time.
  log "tier-3 GPU test"
  (cd "$build" && ctest -R "gpu_tier3" --output-on-failure --timeout 600) 2>&1 |
    tee "$out/ctest-tier3.log" | grep -E "Test +#|tests passed|FAILED|Failure|error" | head -20
  scratch=${TESSERA_SCRATCH:-$build/scratch}
  mkdir -p "$scratch"
  t3=$scratch/tier3.h5
  nnz3=${TESSERA_TIER3_NNZ:-1e9}
  df -h "$scratch" | tail -1
  log "generate $nnz3 nonzeros to $t3"
  mpirun -np "$(nproc)" --bind-to none "$T" generate --dims $amz --nnz "$nnz3" --rank 8 --dist "${TESSERA_TIER3_DIST:-uniform}" \
    --structure sampled --value-type float32 --out "$t3" 2>&1 | tail -1
  ls -la "$t3"
  np3=${TESSERA_TIER3_NP:-1}
  bench tier3-cp-r32-np$np3 mpirun -np "$np3" --bind-to none "$T" cp "$t3" --rank 32 --iters 3 --tol 0 \
    --backend cuda --precision float --host-budget "${TESSERA_TIER3_BUDGET:-8G}"
  if [ -z "${TESSERA_TIER3_SKIP_TIER1:-}" ]; then
    bench tier12-cp-r32-np$np3 mpirun -np "$np3" --bind-to none "$T" cp "$t3" --rank 32 --iters 3 --tol 0 \
      --backend cuda --precision float --host-budget 100G
  fi
  rm -f "$t3"
fi
if has tier2; then
  log "tier-2 and device-loop GPU tests"
  (cd "$build" && ctest -L gpu -R "${TESSERA_CTEST_R:-gpu_tier3|gpu_tier_np1|gpu_cp_np}" \
    --output-on-failure --timeout 600) 2>&1 |
    tee "$out/ctest-tier2.log" | grep -E "Test +#|tests passed|FAILED|Failure|error" | head -20
  scratch=${TESSERA_SCRATCH:-$build/scratch}
  mkdir -p "$scratch"
  t2=$scratch/tier2.h5
  nnz2=${TESSERA_TIER2_NNZ:-76.9e6}
  log "generate $nnz2 nonzeros (nell-2 shape) to $t2"
  mpirun -np "$(nproc)" --bind-to none "$T" generate --dims $nell --nnz "$nnz2" --rank 8 \
    --dist uniform --structure sampled --value-type float32 --out "$t2" 2>&1 | tail -1
  for run in "2 on" "2 off" "1 on"; do
    read -r tier graph <<<"$run"
    name=tier2-loop-t$tier-graph-$graph
    bench $name "$T" cp "$t2" --tier "$tier" --cuda-graph "$graph" --rank 32 --iters 12 --tol 0 \
      --backend cuda --precision float
    python3 - "$out/$name.json" "$name" >>"$summary" <<'PY' || true
import json, sys
j = json.load(open(sys.argv[1])); n = sys.argv[2]
its = [x["seconds"] for x in j["per_iteration"]][2:]
print(f"{n:34s} {sum(its) / max(len(its), 1) * 1e3:9.3f} ms/iter over iterations 3..{len(its) + 2}"
      f"  engine: {j['iteration_engine']}")
PY
  done
  rm -f "$t2"
  # The cuda backend's own streamed format (bench cp under a device budget below the resident
  # copies), captured the same way.
  for graph in on off; do
    name=tier2-format-graph-$graph
    bench $name "$T" bench cp --generate $nell --nnz 76.9e6 --rank 32 --backend cuda \
      --precision float --iters 8 --device-budget 6G --cuda-graph "$graph"
    python3 - "$out/$name.json" "$name" >>"$summary" <<'PY' || true
import json, sys
j = json.load(open(sys.argv[1])); n = sys.argv[2]; t = j.get("tier2", {})
print(f"{n:34s} {j['seconds_per_iteration'] * 1e3:9.3f} ms/iter (bench cp)  tier {j['memory_tier']}"
      f"  copy {t.get('copy_seconds_per_iteration', 0) * 1e3:.3f} ms/iter"
      f"  compute {t.get('compute_seconds_per_iteration', 0) * 1e3:.3f} ms/iter"
      f"  engine: {j['iteration_engine']}")
PY
  done
fi
if has planner; then
  scratch=${TESSERA_SCRATCH:-$build/scratch}
  mkdir -p "$scratch"
  pn=${TESSERA_PLAN_NNZ:-1.74e9}
  st=$scratch/amz-$pn.h5
  df -h "$scratch" | tail -1
  free -g | head -2
  find "$scratch" -maxdepth 1 -name 'amz-*.h5' ! -name "amz-$pn.h5" -delete
  if [ ! -f "$st" ]; then
    log "generate $pn nonzeros (amazon shape, power-law, float32, unique) to $st"
    time mpirun -np "$(nproc)" --bind-to none "$T" generate --dims $amz --nnz "$pn" --rank 8 \
      --dist powerlaw --structure sampled --value-type float32 --out "$st" ${TESSERA_GEN_ARGS:-} 2>&1 |
      tee "$out/generate-$pn.log" | grep -E "error|generated|rounds|short" | head -5
  fi
  ls -la "$st"
  "$T" info "$st" 2>&1 | head -6
  log "plan"
  "$T" plan "$st" --backend cuda --precision float --rank 32 2>&1 | tee "$out/plan-$pn.txt"
  for t in ${TESSERA_PLAN_TIERS:-auto 2 3}; do
    if [ "$t" = 3 ]; then
      # Tier 3 once per read-ahead in TESSERA_PLAN_READ_AHEAD (default: the default, 2) and
      # per page-cache policy in TESSERA_PLAN_READ_CACHE (default keep; drop: every pass
      # reads the disk, against a cold read floor).
      for rc in ${TESSERA_PLAN_READ_CACHE:-keep}; do
        for ra in ${TESSERA_PLAN_READ_AHEAD:-2}; do
          bench plan-cp-r32-$pn-tier-3-ra$ra-$rc "$T" cp "$st" --rank 32 \
            --iters ${TESSERA_PLAN_ITERS:-3} --tol 0 --backend cuda --precision float --tier 3 \
            --read-ahead "$ra" --read-cache "$rc"
        done
      done
      continue
    fi
    bench plan-cp-r32-$pn-tier-$t "$T" cp "$st" --rank 32 \
      --iters ${TESSERA_PLAN_ITERS:-3} --tol 0 --backend cuda --precision float --tier $t
  done
  if [ -z "${TESSERA_PLAN_SKIP_40G:-}" ]; then
    bench plan-cp-r32-$pn-dev40G "$T" cp "$st" --rank 32 --iters ${TESSERA_PLAN_ITERS:-3} --tol 0 \
      --backend cuda --precision float --device-budget 40G
  fi
fi
if has scaling; then
  p=1
  while [ $p -le "$ngpu" ]; do
    bench amazon-powerlaw-cp-r32-np$p mpirun -np $p --bind-to none "$T" bench cp --generate $amz --nnz 1.74e9 \
      --dist powerlaw --rank 32 --backend cuda --precision float --iters 5
    p=$((p * 2))
  done
fi
if has scale; then  # issue 36: strong scaling over 1, 2, 4, ... GPUs of the node, one call
  # TESSERA_SCALE_ONLY="w1 w2": only the cases whose name contains one of the words.
  sbench() {
    local w
    if [ -n "${TESSERA_SCALE_ONLY:-}" ]; then
      for w in $TESSERA_SCALE_ONLY; do [[ $1 == *"$w"* ]] && { bench "$@"; return; }; done
      return 0
    fi
    bench "$@"
  }
  if [ -n "${TESSERA_SCALE_STORE:-}" ]; then
    scratch=${TESSERA_SCRATCH:-$build/scratch}
    mkdir -p "$scratch"
    store=$scratch/amz-1.74e9.h5
    if [ ! -f "$store" ]; then
      log "generate the amazon-shaped store (1.74e9 nonzeros, power-law, float32, unique)"
      ( time mpirun -np "$(nproc)" --bind-to none "$T" generate --dims $amz --nnz 1.74e9 --rank 8 \
        --dist powerlaw --structure sampled --value-type float32 --out "$store" ) 2>&1 |
        tee "$out/scale-generate-store.log" | grep -E "error|generated|real" | head -5
    fi
    ls -la "$store"
  fi
  sdata=$(data_dir congress-cosponsor_leg-leg-year.tns.gz)
  p=1
  while [ $p -le "$ngpu" ]; do
    mp="mpirun -np $p --bind-to none"
    if "$T" bench comm --help >/dev/null 2>&1; then
      sbench scale-comm-np$p $mp "$T" bench comm --backend cuda --precision float
    fi
    [ -n "$sdata" ] && sbench scale-congress-cp-r16-np$p $mp "$T" cp "$sdata/congress-cosponsor_leg-leg-year.tns.gz" \
      --rank 16 --iters 30 --tol 0 --backend cuda --precision float
    for s in allreduce layer; do
      [ $p -eq 1 ] && [ $s = layer ] && continue
      sbench scale-nell2-cp-r32-$s-np$p $mp "$T" bench cp --generate $nell --nnz 76.9e6 --rank 32 \
        --backend cuda --precision float --iters 11 --comm-strategy $s
    done
    [ -z "${TESSERA_SCALE_NO_AMAZON:-}" ] && sbench scale-amazon-cp-r32-np$p $mp "$T" bench cp --generate $amz \
      --nnz 1.74e9 --dist powerlaw --rank 32 --backend cuda --precision float --iters 5
    if [ -n "${TESSERA_SCALE_OVERLAP:-}" ] && [ $p -gt 1 ] && [ -z "${TESSERA_SCALE_NO_AMAZON:-}" ]; then
      sbench scale-amazon-cp-r32-overlap-np$p $mp "$T" bench cp --generate $amz \
        --nnz 1.74e9 --dist powerlaw --rank 32 --backend cuda --precision float --iters 5 \
        --comm-overlap on
    fi
    if [ -n "${TESSERA_SCALE_LAYER_AMAZON:-}" ] && [ $p -gt 1 ]; then
      # Each rank's grid block generated on its GPU (the same ids as above): the grid's cuts
      # balanced by expected nonzeros, and the cut mode's rows dealt round-robin (--deal,
      # with which auto charges the grid nothing: it should choose layer here).
      sbench scale-amazon-cp-r32-layer-np$p $mp "$T" bench cp --generate $amz --nnz 1.74e9 \
        --dist powerlaw --rank 32 --backend cuda --precision float --iters 5 --comm-strategy layer
      sbench scale-amazon-cp-r32-deal-np$p $mp "$T" bench cp --generate $amz --nnz 1.74e9 \
        --dist powerlaw --rank 32 --backend cuda --precision float --iters 5 --deal
    fi
    if [ -n "${TESSERA_SCALE_STORE:-}" ] && [[ " ${TESSERA_SCALE_STORE_NPS:-$p} " == *" $p "* ]]; then
      # The amazon shape from an HDF5 store (generated on the node once, kept in the scratch
      # folder), stored order dealt to the ranks (the default) and cut in contiguous ranges.
      for rd in ${TESSERA_SCALE_STORE_READ:-dealt contiguous}; do
        [ $p -eq 1 ] && [ "$rd" = contiguous ] && continue
        export TESSERA_STORE_READ=$rd
        sbench scale-amazon-store-cp-r32-$rd-np$p $mp -x TESSERA_STORE_READ "$T" cp "$store" \
          --rank 32 --iters 6 --tol 0 --backend cuda --precision float
      done
      unset TESSERA_STORE_READ
      # With --deal (auto then takes the layer strategy: the store read whole, dealt and
      # exchanged; docs/multi-gpu.md, "Dealt grids").
      [ -n "${TESSERA_SCALE_STORE_DEAL:-}" ] && [ $p -gt 1 ] && sbench \
        scale-amazon-store-cp-r32-deal-np$p $mp "$T" cp "$store" --rank 32 --iters 6 --tol 0 \
        --backend cuda --precision float --deal
    fi
    if [ -n "${TESSERA_SCALE_REDDIT:-}" ] && [ $p -eq "$ngpu" ]; then
      sbench scale-reddit-cp-r32-np$p $mp "$T" bench cp --generate 8211298x176962x8116559 \
        --nnz 4.7e9 --dist powerlaw --rank 32 --backend cuda --precision float --iters 5
    fi
    if [ -z "${TESSERA_SCALE_NO_TUCKER_SPTC:-}" ]; then
      sbench scale-nell2-tucker-16-np$p $mp "$T" bench tucker --generate $nell --nnz 76.9e6 \
        --ranks 16,16,16 --backend cuda --precision float --iters 4
      # On several GPUs auto all-reduces these TTMc rows; the owners' exchange beside it.
      [ $p -gt 1 ] && sbench scale-nell2-tucker-16-owners-np$p $mp "$T" bench tucker --generate $nell \
        --nnz 76.9e6 --ranks 16,16,16 --backend cuda --precision float --iters 4 --comm-strategy owners
      [ -n "${TESSERA_SCALE_TUCKER_SUBSPACE:-}" ] && sbench scale-nell2-tucker-16-subspace-np$p $mp "$T" \
        bench tucker --generate $nell --nnz 76.9e6 --ranks 16,16,16 --backend cuda --precision float \
        --iters 4 --svd subspace
      [ -n "${TESSERA_SCALE_TUCKER_AMAZON:-}" ] && sbench scale-amazon-tucker-16-np$p $mp "$T" bench tucker \
        --generate $amz --nnz 1.74e9 --dist powerlaw --ranks 16,16,16 --backend cuda --precision float --iters 3
      sbench scale-sptc-gen-np$p $mp "$T" bench contract --generate --nnz 2e7 --products 1.2e9 \
        --backend cuda --precision double --repeat 3 --no-reference
    fi
    p=$((p * 2))
  done
  python3 jobs/scale_table.py "$out" | tee -a "$summary"
fi
if has tc; then  # issue 18: tensor-core MTTKRP sweep
  ( cd "$build" && ctest -R gpu_tc_mttkrp --output-on-failure >"$out/ctest-tc.log" 2>&1 ) &&
    log "gpu_tc_mttkrp: passed" || { log "gpu_tc_mttkrp: FAILED"; tail -60 "$out/ctest-tc.log"; }
  tcn=${TESSERA_TC_NNZ:-2e7}
  for p in ${TESSERA_TC_PRECISIONS:-float double}; do
    bench tc-sweep-$p "$T" bench mttkrp --tc-sweep --nnz "$tcn" --backend cuda --precision $p --repeat 11
  done
  [ -z "${TESSERA_TC_NO_NELL:-}" ] && bench tc-nell2 "$T" bench mttkrp --tc-sweep --generate $nell \
    --nnz 76.9e6 --ranks 32,64 --backend cuda --precision float --repeat 11
  tdata=$(data_dir aminoacid-fluorescence_dense.tns.gz)
  if [ -n "$tdata" ] && [ -z "${TESSERA_TC_NO_REAL:-}" ]; then
    for t in aminoacid-fluorescence_dense kripke-perf_9mode congress-cosponsor_leg-leg-year; do
      [ -f "$tdata/$t.tns.gz" ] && bench tc-${t%%[-_]*} "$T" bench mttkrp "$tdata/$t.tns.gz" --tc-sweep \
        --backend cuda --precision float --repeat 11
    done
  else
    log "real tensors not found (../shared/data or .deps/data): skipped"
  fi
  for j in "$out"/tc-*.json; do  # the PNGs (where the node has matplotlib; else plot the JSONs later)
    python3 jobs/plot-tc-sweep.py "$j" >"${j%.json}-plot.log" 2>&1 || echo "tc: no plot of $j" >>"$summary"
  done
fi
if has constrained; then  # issue 23: constrained / completion CP next to plain CP, nell-2 shape
  rk=${TESSERA_CON_RANK:-32}
  g="--generate $nell --nnz 76.9e6 --generate-on host --backend cuda --precision float -r $rk --iters ${TESSERA_CON_ITERS:-6}"
  bench con-plain-r$rk "$T" bench cp $g
  bench con-nonneg-r$rk "$T" bench cp $g --nonneg all
  bench con-nonneg-l1l2-r$rk "$T" bench cp $g --nonneg all --l1 0.01 --l2 0.1
  bench con-observed-r$rk "$T" bench cp $g --observed-only --l2 1e-3
  bench con-observed-holdout-r$rk "$T" bench cp $g --observed-only --holdout 0.1 --l2 1e-3
  python3 - "$out" "$rk" <<'PY' | tee -a "$summary"
import json, os, sys
out, rk = sys.argv[1], sys.argv[2]
def load(n):
    p = os.path.join(out, f"con-{n}-r{rk}.json")
    return json.load(open(p)) if os.path.exists(p) else None
plain = load("plain")
for n in ("plain", "nonneg", "nonneg-l1l2", "observed", "observed-holdout"):
    j = load(n)
    if j is None or plain is None:
        print(f"constrained {n}: no result"); continue
    s = j["share"]; c = j.get("constraints", {}); h = c.get("holdout")
    extra = f"  validation RMSE {h['validation_rmse']:.4g} (mean {h['mean_predictor_rmse']:.4g})" if h else ""
    print(f"constrained r{rk} {n:16s} {j['seconds_per_iteration']*1e3:9.3f} ms/iter  x{j['seconds_per_iteration']/plain['seconds_per_iteration']:5.2f} plain  "
          f"kernel {s['kernel']*100:4.1f}% solve {s['solve']*100:4.1f}%  floor-ratio {j['ratio_to_floor']:.2f}  fit {j['fit']:.5f}{extra}")
PY
fi
if has latency; then  # issue 21: iteration latency, before (base build) and after
  ldata=$(data_dir congress-cosponsor_leg-leg-year.tns.gz)
  bins="new:$T"
  base_bin=$(build_base) && bins="base:$base_bin $bins"
  C=$ldata/congress-cosponsor_leg-leg-year.tns.gz
  for b in $bins; do
    lab=${b%%:*}; bin=${b#*:}
    variants="default"; [ "$lab" = new ] && variants="graph nograph"
    for v in $variants; do
      flag=; [ "$v" = nograph ] && flag="--cuda-graph off"
      for R in 16 32; do
        [ -n "$ldata" ] && bench lat-$lab-$v-congress-cp-r$R "$bin" cp "$C" --rank $R --iters 26 --tol 0 \
          --backend cuda --precision float $flag
      done
      bench lat-$lab-$v-nell2-cp-r32 "$bin" bench cp --generate $nell --nnz 76.9e6 --rank 32 --backend cuda \
        --precision float --iters 11 $flag
    done
    [ -n "$ldata" ] && bench lat-$lab-congress-mttkrp-r16 "$bin" bench mttkrp "$C" --rank 16 --backend cuda \
      --precision float --repeat 20
    bench lat-$lab-nell2-mttkrp-r32 "$bin" bench mttkrp --generate $nell --nnz 76.9e6 --rank 32 --backend cuda \
      --precision float --repeat 10
    bench lat-$lab-nell2-tucker-16 "$bin" bench tucker --generate $nell --nnz 76.9e6 --ranks 16,16,16 \
      --backend cuda --precision float --iters 6 -v
    bench lat-$lab-nell2-ttmc-16 "$bin" bench ttmc --generate $nell --nnz 76.9e6 --ranks 16,16,16 \
      --backend cuda --precision float --repeat 10
    bench lat-$lab-sptc-gen "$bin" bench contract --generate --nnz 2e7 --products 1.2e9 --backend cuda \
      --precision double --repeat 3 --no-reference
  done
  ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  if [ -n "$ncu_bin" ]; then
    log "ncu: MTTKRP nell-2 R 32 (one launch per mode after its warm-up)"
    timeout 300 "$ncu_bin" --kernel-name regex:mttkrp --launch-skip 0 --launch-count 6 --csv \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,l1tex__t_sector_hit_rate.pct,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__t_bytes.sum \
      "$T" bench mttkrp --generate $nell --nnz 76.9e6 --rank 32 --backend cuda --precision float --repeat 1 \
      >"$out/ncu-mttkrp.csv" 2>"$out/ncu-mttkrp.err" || log "ncu failed (see $out/ncu-mttkrp.err)"
  else
    echo "ncu: not on this node" >"$out/ncu-mttkrp.csv"
  fi
  python3 jobs/latency_table.py "$out" | tee -a "$summary"
fi
if has floors; then  # issue 43: one card's distance to the floor, before (base build) and after
  fdata=$(data_dir aminoacid-fluorescence_dense.tns.gz)
  fb15k=$(data_dir kg-fb15k-237_head-rel-tail.tns.gz)
  fb15k=${fb15k:+$fb15k/kg-fb15k-237_head-rel-tail.tns.gz}
  fbins="new:$T"
  if base_bin=$(build_base); then  # TESSERA_FLOORS_NEW_FIRST=1: the new build runs first
    [ "${TESSERA_FLOORS_NEW_FIRST:-0}" = 1 ] && fbins="$fbins base:$base_bin" || fbins="base:$base_bin $fbins"
  fi
  fl() {  # bench, unless TESSERA_FLOORS_ONLY names words none of which is in the case's name
    if [ -n "${TESSERA_FLOORS_ONLY:-}" ]; then
      local w hit=
      for w in $TESSERA_FLOORS_ONLY; do case $1 in *"$w"*) hit=1;; esac; done
      [ -n "$hit" ] || return 0
    fi
    bench "$@"
  }
  for b in $fbins; do
    lab=${b%%:*}; bin=${b#*:}
    g="--generate $nell --nnz 76.9e6 --backend cuda --precision float"
    fl fl-$lab-nell2-mttkrp-r32 "$bin" bench mttkrp $g --rank 32 --repeat 10
    fl fl-$lab-nell2-cp-r32 "$bin" bench cp $g --rank 32 --iters 6
    for R in 16 32; do
      fl fl-$lab-nell2-plain-gh-r$R "$bin" bench cp $g --generate-on host --rank $R --iters 6
      fl fl-$lab-nell2-completion-r$R "$bin" bench cp $g --generate-on host --rank $R --iters 6 --observed-only
    done
    fl fl-$lab-nell2-tucker-16 "$bin" bench tucker $g --ranks 16,16,16 --iters 6 -v
    for gp in fp16 bf16; do  # opt-in 16-bit gathers in the TTMc (session 42)
      fl fl-$lab-nell2-tucker-16-$gp "$bin" bench tucker $g --ranks 16,16,16 --iters 6 -v \
        --gather-precision $gp
    done
    fl fl-$lab-nell2-tucker-8 "$bin" bench tucker $g --ranks 8,8,8 --iters 6 -v
    if [ -n "$fb15k" ]; then  # the fit, float: real data, 40 iterations
      for r in 8 16; do
        fl fl-$lab-fb15k-tucker-$r "$bin" bench tucker "$fb15k" --ranks $r,$r,$r --backend cuda \
          --precision float --iters 40
      done
    fi
    for dist in uniform powerlaw; do  # the TTMc of that Tucker iteration (tensor cores)
      fl fl-$lab-nell2-ttmc-16-$dist "$bin" bench ttmc $g --dist $dist --ranks 16,16,16 --repeat 10
    done
    if [ -n "$fdata" ]; then
      fl fl-$lab-aminoacid-mttkrp-r256 "$bin" bench mttkrp "$fdata/aminoacid-fluorescence_dense.tns.gz" \
        --rank 256 --backend cuda --precision float --repeat 20
      fl fl-$lab-kripke-mttkrp-r32 "$bin" bench mttkrp "$fdata/kripke-perf_9mode.tns.gz" \
        --rank 32 --backend cuda --precision float --repeat 20
    fi
  done
  python3 jobs/floors_table.py "$out" | tee -a "$summary"
fi
if has counts; then  # issue 39: CP-APR (--loss poisson) next to CP-ALS on the same tensor and card
  cdata=$(data_dir congress-cosponsor_leg-leg-year.tns.gz)
  cbins="new:$T"
  base_bin=$(build_base) && cbins="base:$base_bin $cbins"
  for b in $cbins; do
    lab=${b%%:*}; bin=${b#*:}
    for p in ${TESSERA_COUNTS_PRECISIONS:-float}; do
      g="--generate $nell --nnz 76.9e6 --generate-on host --backend cuda --precision $p --rank 32"
      bench ct-$lab-nell2-$p-apr "$bin" bench cp $g --iters 3 --loss poisson
      bench ct-$lab-nell2-$p-apr-inner1 "$bin" bench cp $g --iters 3 --loss poisson --apr-inner-iters 1
      bench ct-$lab-nell2-$p-als "$bin" bench cp $g --iters 5
      if [ -n "$cdata" ]; then
        c="$cdata/congress-cosponsor_leg-leg-year.tns.gz --backend cuda --precision $p --rank 32"
        bench ct-$lab-congress-$p-apr "$bin" bench cp $c --iters 5 --loss poisson
        bench ct-$lab-congress-$p-als "$bin" bench cp $c --iters 5
      fi
    done
  done
fi
if has gcp; then  # issue 39: GCP-SGD's epoch, 1e8 sampled entries, against its floor
  gbins="new:$T"
  base_bin=$(build_base) && gbins="base:$base_bin $gbins"
  for b in $gbins; do
    lab=${b%%:*}; bin=${b#*:}
    g="--generate $nell --nnz 76.9e6 --generate-on host --backend cuda --precision float --rank 32"
    s="--solver gcp --gcp-samples 500000 --gcp-zero-samples 500000 --gcp-epoch-iters 100 --iters 2"
    bench gcp-$lab-nell2-gaussian "$bin" bench cp $g $s --loss gaussian
    bench gcp-$lab-nell2-poisson "$bin" bench cp $g $s --loss poisson
  done
fi
if has counts-np; then  # issue 39's speed at 1, 2, 4 .. GPUs: GCP epoch, CP-APR and CP-ALS per iteration
  cdata=$(data_dir congress-cosponsor_leg-leg-year.tns.gz)
  p=1
  while [ $p -le "$ngpu" ]; do
    mp="mpirun -np $p --bind-to none"
    g="--generate $nell --nnz 76.9e6 --generate-on host --backend cuda --precision float --rank 32"
    s="--solver gcp --gcp-samples 500000 --gcp-zero-samples 500000 --gcp-epoch-iters 100 --iters 2"
    bench cnp-gcp-gaussian-np$p $mp "$T" bench cp $g $s --loss gaussian
    bench cnp-gcp-poisson-np$p $mp "$T" bench cp $g $s --loss poisson
    bench cnp-apr-nell2-np$p $mp "$T" bench cp $g --iters 3 --loss poisson
    bench cnp-als-nell2-np$p $mp "$T" bench cp $g --iters 5
    if [ -n "$cdata" ]; then
      c="$cdata/congress-cosponsor_leg-leg-year.tns.gz --backend cuda --precision float --rank 32"
      bench cnp-apr-congress-np$p $mp "$T" bench cp $c --iters 5 --loss poisson
      bench cnp-als-congress-np$p $mp "$T" bench cp $c --iters 5
    fi
    p=$(( p * 2 ))
  done
fi
if has emulated; then  # issue 38: this node's GPUs as 2 emulated nodes (jobs/emulated-nodes.sh)
  if [ "$ngpu" -ge 2 ]; then
    TESSERA="$T" jobs/emulated-nodes.sh "$out/emulated" 2>&1 | tail -16
    cat "$out/emulated/summary.txt" >>"$summary" 2>/dev/null
  else
    echo "emulated: needs 2 or more GPUs ($ngpu here)" | tee -a "$summary"
  fi
fi
if has eig; then  # issue 43: cuSOLVER's eigen-solvers on one n x n Gram (docs/perf/gpu-h200-floors.md)
  log "eigen-solver probe"
  if nvcc -O2 -arch=sm_90 -I. jobs/probes/eig_probe.cu -lcusolver -lcublas -llapack -o "$out/eig_probe" \
    >"$out/eig-build.log" 2>&1; then
    "$out/eig_probe" 16 | tee "$out/eig.txt" >>"$summary"
  else
    echo "eig: the probe did not build ($out/eig-build.log)" | tee -a "$summary"
  fi
  # The base commit's one-block solvers (its kernels/cuda/dense/block_*.cuh, found first by
  # both probes below), for a before/after in one call.
  ebase=${TESSERA_EIG_BASE_TAR:-${TESSERA_BASE_TAR:-}} inc=
  if [ -n "$ebase" ] && [ -f "$ebase" ]; then
    inc=$build/eig-base-inc
    rm -rf "$inc" && mkdir -p "$inc" &&
      tar -xzf "$ebase" -C "$inc" --wildcards 'kernels/cuda/dense/block_*.cuh' ||
      { echo "eig: the base commit's headers did not unpack" | tee -a "$summary"; inc=; }
  fi
  if [ -n "$inc" ]; then
    # The same probe against the base commit's one-block solver, only that solver and the
    # reference.
    nvcc -O2 -arch=sm_90 -I"$inc" -I. jobs/probes/eig_probe.cu -lcusolver -lcublas -llapack \
      -o "$out/eig_probe_base" >"$out/eig-base-build.log" 2>&1 &&
      { echo "eig, the base commit's one-block solver:"; "$out/eig_probe_base" 16 block; } |
      tee "$out/eig-base.txt" >>"$summary" ||
      echo "eig: the base probe did not build ($out/eig-base-build.log)" | tee -a "$summary"
  fi
  log "Lanczos probe"  # the one-block Lanczos kernel beside the exact one (session 43)
  if nvcc -O3 -arch=sm_90 -std=c++17 -I. jobs/probes/lanczos_probe.cu -o "$out/lanczos_probe" \
    >"$out/lanczos-build.log" 2>&1; then
    "$out/lanczos_probe" | tee "$out/lanczos.txt" >>"$summary"
  else
    echo "eig: the Lanczos probe did not build ($out/lanczos-build.log)" | tee -a "$summary"
  fi
  if [ -n "$inc" ]; then  # the Lanczos probe against the base commit's kernel, where it has one
    [ -f "$inc/kernels/cuda/dense/block_lanczos.cuh" ] &&
      nvcc -O3 -arch=sm_90 -std=c++17 -I"$inc" -I. jobs/probes/lanczos_probe.cu \
        -o "$out/lanczos_probe_base" >"$out/lanczos-base-build.log" 2>&1 &&
      { echo "eig, the base commit's Lanczos kernel:"; "$out/lanczos_probe_base"; } |
      tee "$out/lanczos-base.txt" >>"$summary" ||
      echo "eig: no base Lanczos probe (a commit without it, or $out/lanczos-base-build.log)" |
      tee -a "$summary"
  fi
fi
if has mttkrp-tile; then  # issue 43: factor rows of both inputs in shared memory (docs/perf/gpu-h200-floors.md)
  log "tiled MTTKRP probe"
  g="--generate 12092x9184x28818 --nnz 76.9e6 --rank 32 --backend cuda --precision float --repeat 10"
  bench nell2-mttkrp-r32-full "$T" bench mttkrp $g --gather-precision full
  bench nell2-mttkrp-r32-fp16 "$T" bench mttkrp $g --gather-precision fp16
  if nvcc -O3 -arch=sm_90 -std=c++17 --expt-relaxed-constexpr jobs/probes/mttkrp_tile_probe.cu \
    -o "$out/mttkrp_tile_probe" >"$out/mttkrp-tile-build.log" 2>&1; then
    "$out/mttkrp_tile_probe" | tee "$out/mttkrp-tile.txt" >>"$summary"
  else
    echo "mttkrp-tile: the probe did not build ($out/mttkrp-tile-build.log)" | tee -a "$summary"
  fi
fi
if has python || has study; then  # real tensors beside a checkout or carried in .deps/data
  pdata=$(data_dir congress-cosponsor_leg-leg-year.tns.gz)
fi
if has python; then
  if [ -z "${pdata:-}" ] || ! ls "$build"/python/tessera/_tessera*.so >/dev/null 2>&1; then
    echo "python: skipped (module not built or congress not found)" | tee -a "$summary"
  else
    log "congress CP through Python and through the CLI"
    C=$pdata/congress-cosponsor_leg-leg-year.tns.gz
    "$T" cp "$C" --rank 16 --iters 20 --tol 0 --backend cuda --precision float \
      --json "$out/python-cli.json" >"$out/python-cli.log" 2>&1
    PYTHONPATH=$build/python python3 - "$C" "$out/python-cli.json" <<'PY' | tee -a "$summary"
import json, statistics, sys, tessera
path, cli_json = sys.argv[1], sys.argv[2]
r = tessera.cp_als(path, 16, backend="cuda", precision="float", iters=20, tol=0)
py = statistics.median(h["seconds"] for h in r.history[1:])
cli_rec = json.load(open(cli_json))
cli = statistics.median(h["seconds"] for h in cli_rec["per_iteration"][1:])
print(f"python-vs-cli congress cp r16 float cuda: python {py*1e3:.3f} ms/iter  cli {cli*1e3:.3f} ms/iter  "
      f"ratio {py/cli:.3f}  fit python {r.fit:.6f} cli {cli_rec['fit']:.6f}")
PY
  fi
fi
if has shared; then  # the multi-rank code with ranks sharing GPUs (docs/multi-gpu.md)
  log "multi-rank GPU tests, ranks sharing GPUs (TESSERA_SHARE_GPU=1)"
  (cd "$build" && TESSERA_SHARE_GPU=1 ctest -L gpu -R "${TESSERA_CTEST_R:-_np2|_np4}" \
    --output-on-failure --timeout 600) 2>&1 | tee "$out/ctest-shared.log" |
    grep -E "Test +#|tests passed|FAILED|Failure|error" | head -40
  grep -E "tests passed|tests failed" "$out/ctest-shared.log" | sed 's/^/shared ctest: /' >>"$summary"
  sdata=$(data_dir kg-fb15k-237_head-rel-tail.tns.gz)
  sdata=${sdata:+$sdata/kg-fb15k-237_head-rel-tail.tns.gz}
  if [ -n "$sdata" ]; then  # the same Tucker on 1, 2 and 4 ranks: fits and how the phases were timed
    for np in ${TESSERA_SHARED_NPS:-1 2 4}; do
      log "tessera tucker fb15k-237 16,16,16 on $np rank(s), sharing the GPU(s)"
      TESSERA_SHARE_GPU=1 mpirun --oversubscribe -np "$np" "$T" tucker "$sdata" -r 16,16,16 -i 10 \
        --tol 0 --backend cuda --json "$out/shared-tucker-np$np.json" >"$out/shared-tucker-np$np.log" 2>&1 ||
        { echo "shared tucker np$np: rc $?" | tee -a "$summary"; tail -5 "$out/shared-tucker-np$np.log"; }
    done
    python3 - "$out" ${TESSERA_SHARED_NPS:-1 2 4} <<'PY' | tee -a "$summary"
import json, sys
out, nps = sys.argv[1], sys.argv[2:]
ref = None
for np in nps:
    try:
        j = json.load(open(f"{out}/shared-tucker-np{np}.json"))
    except Exception as e:
        print(f"shared tucker fb15k np{np}: no record ({e})"); continue
    ref = j["fit"] if ref is None else ref
    cs = j.get("comm_split") or {}
    split = " ".join(f"{k.replace('_seconds', '')} {v*1e3:.3f}" for k, v in cs.items()
                     if k.endswith("_seconds") and isinstance(v, (int, float)))
    print(f"shared tucker fb15k-237 16,16,16 np{np}: fit {j['fit']:.12f} (differs from np{nps[0]} by "
          f"{abs(j['fit'] - ref):.1e})  phase_timing {j.get('phase_timing')}  comm split ms/iter: {split or '-'}"
          "  (times: ranks share one GPU, not representative)")
PY
  fi
fi
if has study; then
  st=${TESSERA_STUDY:-jobs/studies/gpu-1.toml}
  log "study $st"
  TESSERA=$T TESSERA_SHARED_DATA=${pdata:-} python3 jobs/study.py run "$st" --local --out "$out/study" \
    >"$out/study.log" 2>&1
  echo "study $st: rc $? ($out/study/results.md)" | tee -a "$summary"
  cat "$out/study/results.md" 2>/dev/null | tee -a "$summary"
fi
echo
# The commit, and whether the tree differs from it: a copied checkout's .git can be older
# than its files (seen: a node copy whose HEAD was two commits behind the tree it built).
head=$(git rev-parse --short HEAD 2>/dev/null || echo ?)
changed=$(git status --porcelain --untracked-files=no 2>/dev/null | wc -l)
[ "$changed" -gt 0 ] && head="$head, $changed tracked files differ from it"
echo "==== summary ($(nvidia-smi -L | head -1 | cut -c1-40), $ngpu GPU(s), commit $head) ===="
cat "$summary"

#!/usr/bin/env bash
# Hardening job (docs/reliability.md, "Sanitizers and fuzzing"), run by CI after the normal
# tests (.ci/run). One clang build, CPU only, with AddressSanitizer + UndefinedBehaviorSanitizer
# (-DTESSERA_SANITIZE=address,undefined), the libFuzzer harnesses (-DTESSERA_FUZZ=ON) and
# warnings as errors (-DTESSERA_WERROR=ON, as jobs/test.sh with GCC), built as a unity build
# (-DCMAKE_UNITY_BUILD=ON: about a third of the CPU time; docs/reliability.md, "CI time"):
#   1. builds the tessera binary, the test binaries of the sanitizer subset and the harnesses;
#   2. runs each harness over its seed corpus (tests/fuzz/corpus/<target>);
#   3. runs the sanitizer subset with ctest (any ASan/UBSan report fails its test) while it
#      fuzzes each harness for a bounded time, two at a time, at the lowest CPU priority; a
#      crash, sanitizer report, leak or broken invariant fails the job and leaves the input
#      in BUILD/fuzz/<target>/artifacts/.
#   jobs/hardening.sh          all three steps
#   jobs/hardening.sh build    step 1 only (.ci/run starts it early, at the lowest priority)
#   jobs/hardening.sh test     steps 2 and 3 on an existing build (builds what is missing)
# Environment:
#   TESSERA_HARDENING_BUILD  build folder (default: build-hardening)
#   TESSERA_FUZZ_SECONDS     fuzzing time per harness in seconds (default 150: at nice 19 beside
#                            the subset, 60 s ran a fifth of a free core's inputs; two rounds of
#                            two end within the ~600 s subset; 0: corpus only)
#   TESSERA_FUZZ_SEED        libFuzzer's -seed (default 1, so a CI run can be repeated)
#   TESSERA_FUZZ_TIMEOUT     seconds one input may take, wall clock (default 300; see fuzz_one)
#   TESSERA_JOBS             build jobs (default: nproc)
#   TESSERA_WERROR           warnings are errors (default ON, as in jobs/test.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
step=${1:-all}
case $step in
  all | build | test) ;;
  *) echo "hardening: unknown step '$step' (usage: jobs/hardening.sh [all|build|test])" >&2; exit 2 ;;
esac
build=${TESSERA_HARDENING_BUILD:-$here/build-hardening}
fuzz_seconds=${TESSERA_FUZZ_SECONDS:-150}
fuzz_seed=${TESSERA_FUZZ_SEED:-1}
fuzz_timeout=${TESSERA_FUZZ_TIMEOUT:-300}
jobs=${TESSERA_JOBS:-$(nproc)}

# The sanitizer subset: every ctest test (unit, MPI, driver) but these (ctest -E):
#  - the rank sweeps on 1, 4 and 5 ranks, and the slow algorithm tests on 3 ranks
#    (tier3_disk, tier3_algo): the subset runs the same code on 2 ranks (and on 3 where
#    that is quick), at a fraction of the time;
#  - the algorithm invariance tests algo_cp, algo_tucker and algo_contract on any rank
#    count: they check numbers (the same fits and outputs on 1 to 4 ranks, every strategy
#    and backend), which the normal job (jobs/test.sh) checks; the code they run (the CP-ALS
#    and Tucker-HOOI loops, the distributed contraction) runs under the sanitizers in the
#    driver tests (cp, tucker, contract through the tessera binary on 1 to 3 ranks), and
#    its kernels in kernels_* and fuzz_einsum;
#  - plan_driver_test: it asserts measured peak RSS against the planner's estimate, and
#    ASan's shadow memory and quarantine add hundreds of MB to every process.
# docs/reliability.md ("What CI runs", "CI time") gives the measured times and the reasoning.
subset_exclude='(_np[145]|^(algo_cp|algo_tucker|algo_contract)_np[23]|^(tier3_disk|tier3_algo)_np3|^plan_driver_test)$'
subset=(-LE fuzz -E "$subset_exclude")
fuzz_targets=(tns h5store einsum options)

t0=$(date +%s)
stamp() { echo "hardening: $1 ($(( $(date +%s) - t0 )) s since start)"; }

configure() {
  # clang, its libFuzzer/sanitizer runtimes and OpenMP runtime, plus Tessera's own packages.
  "$here/jobs/setup.sh" --packages clang-14 libclang-rt-14-dev libomp-14-dev
  local cc cxx launcher=()
  cc=$(command -v clang-14 || command -v clang)
  cxx=$(command -v clang++-14 || command -v clang++)
  command -v ccache >/dev/null &&
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  mkdir -p "$build"
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DTESSERA_WITH_CUDA=OFF -DTESSERA_SANITIZE=address,undefined -DTESSERA_FUZZ=ON \
    -DCMAKE_UNITY_BUILD=ON \
    -DTESSERA_WERROR="${TESSERA_WERROR:-ON}" \
    ${launcher[@]+"${launcher[@]}"} >"$build/configure.log" 2>&1 ||
    { cat "$build/configure.log"; exit 1; }
  stamp "configured $build"
}

# Build only what the subset runs: the executables named by its test commands, the tessera
# binary the driver tests launch, and the harnesses. On a built tree this is a no-op.
build_subset() {
  local selected line name exe targets=()
  selected=$(cd "$build" && ctest -N "${subset[@]}" | sed -n 's/^ *Test *#[0-9]*: //p')
  while IFS= read -r line; do
    name=$(sed -n 's/^add_test(\[=\[\(.*\)\]=\].*/\1/p' <<<"$line")
    grep -qxF "$name" <<<"$selected" || continue
    for exe in $(grep -o "\"$build/[^\"]*\"" <<<"$line" | tr -d '"'); do
      targets+=("$(basename "$exe")")
    done
  done < <(find "$build" -name CTestTestfile.cmake -exec grep -h '^add_test(' {} +)
  mapfile -t targets < <(printf '%s\n' "${targets[@]}" | sort -u)
  cmake --build "$build" -j "$jobs" --target tessera "${targets[@]}" \
    "${fuzz_targets[@]/#/fuzz_}"
  stamp "built"
}

if [ "$step" != test ] || [ ! -f "$build/build.ninja" ]; then configure; fi
build_subset
[ "$step" = build ] && exit 0

# Every harness over its seed corpus (ctest label fuzz, seconds), then the bounded fuzzing in
# the background at the lowest CPU priority while the sanitizer subset runs: the subset keeps
# about 40% of the 2 cores idle (its driver tests wait on process start-up and mpiexec; 930
# CPU-seconds in 786 s on 2 cores, docs/reliability.md "CI time"), and the fuzzers take those
# cycles instead of 2 minutes of their own after it. A failure is reported at the end, so one
# run shows every problem.
problems=()
(cd "$build" && ctest --output-on-failure --timeout 600 -L fuzz) || problems+=("seed corpora")
stamp "seed corpora run"

# Bounded fuzzing, two harnesses at a time (one core each). New inputs go to BUILD/fuzz/,
# never into the repository's seed corpus. The same runtime options as the tests
# (cmake/TesseraHardening.cmake says why intercept_tls_get_addr=0).
# libFuzzer's -timeout is wall-clock time. At nice 19 beside the subset's MPI tests (whose
# ranks poll at full priority) a harness can get under 1% of a core for tens of seconds, so
# an input that takes 0.1 s alone can pass 30 s: that failed CI once (stop 59, fuzz_options,
# an input that replays in milliseconds; docs/reliability.md, "Session 32"). A real hang still
# ends the run, with its input, after fuzz_timeout seconds.
fuzz_one() {
  local t=$1 dir="$build/fuzz/$1" dict=()
  mkdir -p "$dir/corpus" "$dir/artifacts"
  [ -f "$here/tests/fuzz/$t.dict" ] && dict=(-dict="$here/tests/fuzz/$t.dict")
  ASAN_OPTIONS="detect_leaks=1:check_initialization_order=1:strict_init_order=1:intercept_tls_get_addr=0" \
    LSAN_OPTIONS="suppressions=$here/tests/sanitizers/lsan.supp:print_suppressions=0" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
    nice -n 19 "$build/tests/fuzz/fuzz_$t" -max_total_time="$fuzz_seconds" -seed="$fuzz_seed" \
    -timeout="$fuzz_timeout" -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$dir/artifacts/" \
    ${dict[@]+"${dict[@]}"} "$dir/corpus" "$here/tests/fuzz/corpus/$t" >"$dir/log" 2>&1
}
# Runs the rounds; writes one line per harness to BUILD/fuzz/summary ("ok" or "FAILED").
fuzz_all() {
  local i t p pids
  mkdir -p "$build/fuzz"
  : >"$build/fuzz/summary"
  for ((i = 0; i < ${#fuzz_targets[@]}; i += 2)); do
    pids=()
    for t in "${fuzz_targets[@]:i:2}"; do
      fuzz_one "$t" &
      pids+=("$!:$t")
    done
    for p in "${pids[@]}"; do
      if wait "${p%%:*}"; then
        echo "ok ${p#*:}" >>"$build/fuzz/summary"
      else
        echo "FAILED ${p#*:}" >>"$build/fuzz/summary"
      fi
    done
  done
}
fuzz_pid=""
if [ "$fuzz_seconds" -gt 0 ]; then
  fuzz_all &
  fuzz_pid=$!
fi

(cd "$build" && ctest --output-on-failure --timeout 1800 -j "$jobs" "${subset[@]}") ||
  problems+=("sanitizer tests")
stamp "sanitizer tests run"

if [ -n "$fuzz_pid" ]; then
  wait "$fuzz_pid" || true
  for t in "${fuzz_targets[@]}"; do
    if grep -qx "ok $t" "$build/fuzz/summary"; then
      echo "fuzz_$t: $(grep -E '^(Done|stat::number_of_executed_units)' \
        "$build/fuzz/$t/log" | tr '\n' ' ')"
    else
      problems+=("fuzz_$t")
      echo "fuzz_$t: FAILED (log and input: $build/fuzz/$t/)"
      tail -60 "$build/fuzz/$t/log"
    fi
  done
  stamp "fuzzed ${#fuzz_targets[@]} harnesses for ${fuzz_seconds} s each, beside the tests"
fi
if [ ${#problems[@]} -gt 0 ]; then
  echo "hardening: FAILED: ${problems[*]}"
  exit 1
fi
stamp "done, no problem found"

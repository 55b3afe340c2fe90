// Kernel tuning options: every knob that changes which kernel or layout a backend uses,
// one struct, set through the API (Backend::set_tuning, make_backend) and on the command
// line (drivers: --cuda-layout, --mttkrp-kernel, ...). Kernels read them from their
// backend; none reads the environment. Results do not depend on them beyond rounding.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::kernels {

struct Tuning {
  // ---- cuda MTTKRP ----
  /// Sorted-copy layout: default (the l1 plan where it applies, else plain) | auto (choose
  /// from the shape) | plain | smem | l2. Forced layouts skip the profitability tests of
  /// auto, not its limits.
  std::string cuda_layout = "default";
  /// Rows per block of the blocked layouts (0: from the plan).
  std::uint64_t cuda_block_rows = 0;
  /// The l2 layout's evict-last access-policy hint (false: the l2 layout without it).
  bool cuda_l2_hint = true;
  /// Tile kernel of the plain and l2 layouts: auto (the register-blocked kernel where it
  /// supports the call, else classic) | blocked (same as auto) | classic.
  std::string mttkrp_kernel = "auto";
  /// MTTKRP on tensor cores (hybrid layout, docs/tensor-core-mttkrp.md): auto (where the
  /// cost model predicts a gain) | on (every mode with tiles) | off (CUDA cores only).
  std::string tensor_cores = "auto";
  /// Precision of the tensor-core tiles: auto (3xtf32 for float, fp64 for double) | 3xtf32 |
  /// tf32 | bf16 (float tensors) | fp64 (double tensors).
  std::string tc_precision = "auto";
  /// Density (nonzeros / 256) at or above which a 16 x 16 tile of a mode's hybrid layout
  /// goes to tensor cores, in (0, 1].
  double tc_tile_density = 0.25;
  // ---- cuda TTMc ----
  /// auto (the tensor-core kernel where it applies) | cores (CUDA cores only).
  std::string ttmc_kernel = "auto";
  /// Nonzeros per TTMc warp tile (0: the built-in value; else a multiple of 32 in 64..65536).
  int ttmc_tile = 0;
  // ---- cuda SpTC ----
  /// SpTC temporaries from the device's stream-ordered pool (false: cudaMalloc/cudaFree).
  bool sptc_pool = true;
  /// Block density at or above which an SpTC block runs on tensor cores (< 0: the built-in
  /// default; 0: every block with a nonzero; > 1: none).
  double sptc_tc_threshold = -1;
  // ---- cpu ----
  /// Vector ISA of the cpu MTTKRP: auto (the best the CPU has) | base | avx2 | avx512.
  std::string cpu_isa = "auto";
  // ---- diagnostics ----
  /// Per-phase timing lines of the cuda operations on stderr.
  bool trace = false;
};

/// Throws InputError naming the option (its CLI spelling) when a field is out of range.
void check(const Tuning& t);

}  // namespace tessera::kernels

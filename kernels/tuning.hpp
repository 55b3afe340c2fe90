// Kernel tuning options: every knob that changes which kernel or layout a backend uses, one
// struct (Tuning), set through the API (Backend::set_tuning, make_backend), on the command
// line (drivers: --cuda-layout, --mttkrp-kernel, ...) and by the Python keywords of the same
// names. Kernels read them from their backend as typed values (enums, numbers); none reads
// the environment and none compares strings. Results do not depend on them beyond rounding.
//
// Every knob is described once, in the table kKnobs below (issue 40; the model: GenTen's
// typed enums with name tables, parsed once and printed from the same table): its key (the
// field, the run record's "tuning" key and the Python keyword; the CLI flag is the key with
// '-' for '_'), an older flag spelling still accepted, its help, its checks, its retired
// environment variable. Each enumeration has one name table (Names<E>). Everything else is
// produced from them: the CLI options and --help (drivers/tuning_options.cpp), the Python
// keywords and tessera.TUNING (python/src/tuning.cpp), the run record's "tuning" object and
// the schema's entries for it (drivers/record.cpp, checked against
// docs/run-record.schema.json by tests/unit/tuning_knobs.cpp), check() and the warnings on
// retired environment variables (drivers/main.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "util/error.hpp"

namespace tessera::kernels {

// ---- the enumerations of the tuning knobs ----

/// Sorted-copy layout of the cuda MTTKRP (--cuda-layout).
enum class CudaLayout { standard, automatic, plain, smem, l2 };
/// Tile kernel of the plain and l2 cuda MTTKRP layouts (--mttkrp-kernel).
enum class MttkrpKernel { automatic, classic };
/// MTTKRP on tensor cores (--tensor-cores).
enum class TensorCores { automatic, on, off };
/// Precision of the tensor-core MTTKRP tiles (--tc-precision).
enum class TcPrecisionOption { automatic, tf32x3, tf32, bf16, fp64 };
/// Precision of the factor rows the cuda blocked MTTKRP gathers (--gather-precision).
enum class GatherPrecision { full, fp16, bf16 };
/// Kernel of the cuda TTMc (--ttmc-kernel).
enum class TtmcKernel { automatic, cores };
/// Path of the cuda one-block eigen-solver of float Tucker's Gram matrices (--eig-solver).
enum class EigSolver { automatic, exact };

namespace cpu {
/// Instruction set of the cpu MTTKRP's inner loops, chosen at run time (the build needs no
/// -march); --cpu-isa.
enum class Isa {
  automatic,  ///< the widest one this CPU supports
  base,       ///< the compiler's baseline (SSE2 on x86-64)
  avx2,       ///< AVX2 + FMA, x86-64 only
  avx512,     ///< AVX-512F, x86-64 only
};
}  // namespace cpu

/// One spelling of an enumeration value: its name, what it means in --help ("" nothing to
/// add), and whether it is an alias (accepted when parsed, never printed: the value prints
/// as its first name that is no alias).
template <typename E>
struct EnumName {
  E value;
  std::string_view name;
  std::string_view help = {};
  bool alias = false;
};

/// The name table of an enumeration: `static constexpr EnumName<E> all[]`.
template <typename E>
struct Names;

template <>
struct Names<CudaLayout> {
  static constexpr EnumName<CudaLayout> all[] = {
      {CudaLayout::standard, "default", "the l1 plan where it applies, else plain"},
      {CudaLayout::automatic, "auto", "chosen from the shape"},
      {CudaLayout::plain, "plain"},
      {CudaLayout::smem, "smem"},
      {CudaLayout::l2, "l2"}};
};
template <>
struct Names<MttkrpKernel> {
  static constexpr EnumName<MttkrpKernel> all[] = {
      {MttkrpKernel::automatic, "auto",
       "the register-blocked kernel where it supports the call, else classic"},
      {MttkrpKernel::automatic, "blocked", "same as auto", true},
      {MttkrpKernel::classic, "classic"}};
};
template <>
struct Names<TensorCores> {
  static constexpr EnumName<TensorCores> all[] = {
      {TensorCores::automatic, "auto", "where the cost model predicts a gain"},
      {TensorCores::on, "on", "every mode with tiles"},
      {TensorCores::off, "off", "CUDA cores only"}};
};
template <>
struct Names<TcPrecisionOption> {
  static constexpr EnumName<TcPrecisionOption> all[] = {
      {TcPrecisionOption::automatic, "auto", "3xtf32 for float, fp64 for double"},
      {TcPrecisionOption::tf32x3, "3xtf32", "about float accuracy"},
      {TcPrecisionOption::tf32, "tf32"},
      {TcPrecisionOption::bf16, "bf16", "float tensors"},
      {TcPrecisionOption::fp64, "fp64", "double tensors"}};
};
template <>
struct Names<GatherPrecision> {
  static constexpr EnumName<GatherPrecision> all[] = {
      {GatherPrecision::full, "full", "the factors' own precision"},
      {GatherPrecision::fp16, "fp16", "half-precision copies (11-bit significands)"},
      {GatherPrecision::bf16, "bf16", "bfloat16 copies (8-bit significands, float's range)"}};
};
template <>
struct Names<TtmcKernel> {
  static constexpr EnumName<TtmcKernel> all[] = {
      {TtmcKernel::automatic, "auto", "the tensor-core kernel where it applies"},
      {TtmcKernel::cores, "cores", "CUDA cores only"}};
};
template <>
struct Names<EigSolver> {
  static constexpr EnumName<EigSolver> all[] = {
      {EigSolver::automatic, "auto",
       "Lanczos first where C >= 192, the exact solver where it declines"},
      {EigSolver::exact, "exact", "the exact solver only"}};
};
template <>
struct Names<cpu::Isa> {
  static constexpr EnumName<cpu::Isa> all[] = {
      {cpu::Isa::automatic, "auto", "the best this CPU has"},
      {cpu::Isa::base, "base"},
      {cpu::Isa::avx2, "avx2"},
      {cpu::Isa::avx512, "avx512"}};
};

/// The printed name of `v` (its first name that is no alias; "?" for a value outside the
/// table).
template <typename E>
constexpr std::string_view name_of(E v) {
  for (const EnumName<E>& n : Names<E>::all)
    if (n.value == v && !n.alias) return n.name;
  return "?";
}

/// The value named `s` (aliases included), or nothing.
template <typename E>
constexpr std::optional<E> parse_name(std::string_view s) {
  for (const EnumName<E>& n : Names<E>::all)
    if (n.name == s) return n.value;
  return std::nullopt;
}

/// The accepted names of an enumeration in words: "default, auto, plain, smem or l2".
template <typename E>
std::string names_in_words() {
  std::string s;
  const std::size_t n = std::size(Names<E>::all);
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) s += i + 1 == n ? " or " : ", ";
    s += Names<E>::all[i].name;
  }
  return s;
}

/// The value named `s`; an InputError "<what> must be <names> (got '<s>')" otherwise.
template <typename E>
E parse_named(std::string_view s, std::string_view what) {
  const std::optional<E> v = parse_name<E>(s);
  TESSERA_INPUT_CHECK(v.has_value(),
                      what << " must be " << names_in_words<E>() << " (got '" << s << "')");
  return *v;
}

/// True when `v` is a value of the table (a cast from an integer may not be).
template <typename E>
constexpr bool named(E v) {
  return name_of(v) != "?";
}

struct Tuning {
  // ---- cuda MTTKRP ----
  /// Sorted-copy layout. Forced layouts skip the profitability tests of auto, not its limits.
  CudaLayout cuda_layout = CudaLayout::standard;
  /// Rows per block of the blocked layouts (0: from the plan).
  std::uint64_t cuda_block_rows = 0;
  /// The l2 layout's evict-last access-policy hint (false: the l2 layout without it).
  bool cuda_l2_hint = true;
  /// Tile kernel of the plain and l2 layouts.
  MttkrpKernel mttkrp_kernel = MttkrpKernel::automatic;
  /// MTTKRP on tensor cores (hybrid layout, docs/tensor-core-mttkrp.md).
  TensorCores tensor_cores = TensorCores::automatic;
  /// Precision of the tensor-core tiles.
  TcPrecisionOption tc_precision = TcPrecisionOption::automatic;
  /// Density (nonzeros / 256) at or above which a 16 x 16 tile of a mode's hybrid layout
  /// goes to tensor cores, in (0, 1].
  double tc_tile_density = 0.25;
  /// Precision of the factor rows the blocked MTTKRP and the tensor-core TTMc gather (float
  /// tensors): reduced copies made at each call, sums in float.
  GatherPrecision gather_precision = GatherPrecision::full;
  // ---- cuda TTMc ----
  TtmcKernel ttmc_kernel = TtmcKernel::automatic;
  /// The one-block eigen-solver's path (float Tucker's Gram matrices, C <= 256, R <= 16):
  /// Lanczos first where it applies (kernels/cuda/dense/block_lanczos.cuh), or the exact
  /// solver only.
  EigSolver eig_solver = EigSolver::automatic;
  /// Nonzeros per TTMc warp tile (0: the built-in value; else a multiple of 32 in 64..65536).
  int ttmc_tile = 0;
  // ---- cuda SpTC ----
  /// SpTC temporaries from the device's stream-ordered pool (false: cudaMalloc/cudaFree).
  bool sptc_pool = true;
  /// Block density at or above which an SpTC block runs on tensor cores (< 0: the built-in
  /// default; 0: every block with a nonzero; > 1: none).
  double sptc_tc_threshold = -1;
  // ---- cpu ----
  /// Vector ISA of the cpu MTTKRP.
  cpu::Isa cpu_isa = cpu::Isa::automatic;
  // ---- diagnostics ----
  /// Per-phase timing lines of the cuda operations on stderr.
  bool trace = false;
};

/// One tuning knob: the field `field` of Tuning, of type V (an enumeration with Names<V>,
/// bool, or a number).
template <typename V>
struct Knob {
  using Value = V;
  using Field = V Tuning::*;
  /// The field's name: the run record's "tuning" key and the Python keyword; the CLI flag
  /// is "--" + key with '-' for '_' (flag()).
  std::string_view key;
  Field field;
  /// --help: for an enumeration, `help` + " " + the values with their help + `tail`.
  std::string_view help;
  std::string_view tail = {};
  /// An older CLI spelling still accepted ("" none), e.g. "--tc-threshold".
  std::string_view alias = {};
  /// The environment variable earlier versions read inside the kernels ("" none): warned
  /// about when set (drivers/main.cpp).
  std::string_view retired_env = {};
  /// bool: a bare flag (--trace) instead of on|off.
  bool bare_flag = false;
  /// Numbers: the accepted values, in words (error messages, Python) and as --help shows
  /// them after the type; the check; the schema's bounds ("" none: JSON members to add to
  /// {"type": "integer"|"number"}).
  std::string_view expected = {};
  std::string_view shown = {};
  bool (*valid)(V) = nullptr;
  std::string_view schema_bounds = {};
};

/// Every tuning knob, in the order of --help and of the run record.
inline constexpr auto kKnobs = std::make_tuple(
    Knob<CudaLayout>{.key = "cuda_layout",
                     .field = &Tuning::cuda_layout,
                     .help = "cuda MTTKRP layout of the sorted copy:",
                     .tail = "; a forced layout skips auto's profitability tests, not its limits",
                     .retired_env = "TESSERA_CUDA_LAYOUT"},
    Knob<std::uint64_t>{.key = "cuda_block_rows",
                        .field = &Tuning::cuda_block_rows,
                        .help = "cuda: rows per block of the blocked layouts (0: from the plan)",
                        .retired_env = "TESSERA_CUDA_BLOCK_ROWS",
                        .expected = "an integer below 2^32",
                        .shown = "UINT in [0 - 4294967295]",
                        .valid = [](std::uint64_t v) { return v < (std::uint64_t(1) << 32); },
                        .schema_bounds = R"("minimum": 0, "maximum": 4294967295)"},
    Knob<bool>{.key = "cuda_l2_hint",
               .field = &Tuning::cuda_l2_hint,
               .help = "cuda: the l2 layout's evict-last access-policy hint (off: the l2 layout "
                       "without it)",
               .retired_env = "TESSERA_CUDA_L2_HINT"},
    Knob<MttkrpKernel>{.key = "mttkrp_kernel",
                       .field = &Tuning::mttkrp_kernel,
                       .help = "cuda: tile kernel of the plain and l2 MTTKRP layouts:",
                       .retired_env = "TESSERA_CUDA_MTTKRP_KERNEL"},
    Knob<TensorCores>{.key = "tensor_cores",
                      .field = &Tuning::tensor_cores,
                      .help = "cuda MTTKRP: tensor cores on the dense 16 x 16 tiles of each mode, "
                              "CUDA cores on the rest (docs/tensor-core-mttkrp.md); in float "
                              "also the row Grams of --observed-only (off: CUDA cores):"},
    Knob<TcPrecisionOption>{.key = "tc_precision",
                            .field = &Tuning::tc_precision,
                            .help = "cuda MTTKRP: precision of the tensor-core tiles:"},
    Knob<double>{.key = "tc_tile_density",
                 .field = &Tuning::tc_tile_density,
                 .help = "cuda MTTKRP: density (nonzeros / 256) at or above which a 16 x 16 tile "
                         "goes to tensor cores, in (0, 1]",
                 .expected = "a density in (0, 1]",
                 .shown = "(0, 1]",
                 .valid = [](double v) { return v > 0 && v <= 1; },
                 .schema_bounds = R"("exclusiveMinimum": 0, "maximum": 1)"},
    Knob<GatherPrecision>{.key = "gather_precision",
                          .field = &Tuning::gather_precision,
                          .help = "cuda, float tensors: precision of the factor rows the "
                                  "blocked MTTKRP gathers, products and sums in float, and "
                                  "the tensor-core TTMc (Tucker) gathers, tf32 products "
                                  "(docs/reduced-precision.md; elsewhere full):"},
    Knob<TtmcKernel>{.key = "ttmc_kernel",
                     .field = &Tuning::ttmc_kernel,
                     .help = "cuda TTMc:",
                     .retired_env = "TESSERA_CUDA_TTMC_KERNEL"},
    Knob<EigSolver>{.key = "eig_solver",
                    .field = &Tuning::eig_solver,
                    .help = "cuda, float Tucker: the one-block eigen-solver of the Gram "
                            "matrices (C <= 256, R <= 16; docs/perf/gpu-h200-tucker.md):"},
    Knob<int>{.key = "ttmc_tile",
              .field = &Tuning::ttmc_tile,
              .help = "cuda TTMc: nonzeros per warp tile (0: the built-in value; else a multiple "
                      "of 32 in 64..65536)",
              .retired_env = "TESSERA_CUDA_TTMC_TILE",
              .expected = "0 (built-in) or a multiple of 32 in 64..65536",
              .shown = "0|64..65536 (multiple of 32)",
              .valid = [](int v) { return v == 0 || (v >= 64 && v <= 65536 && v % 32 == 0); },
              .schema_bounds = R"("minimum": 0, "maximum": 65536)"},
    Knob<bool>{.key = "sptc_pool",
               .field = &Tuning::sptc_pool,
               .help = "cuda SpTC: temporaries from the device's stream-ordered pool (off: "
                       "cudaMalloc/cudaFree)",
               .retired_env = "TESSERA_CUDA_SPTC_POOL"},
    Knob<double>{.key = "sptc_tc_threshold",
                 .field = &Tuning::sptc_tc_threshold,
                 .help = "cuda SpTC: block density (nonzeros / 256 of a 16 x 16 block) at or "
                         "above which a block runs on tensor cores (< 0: the built-in default; 0: "
                         "every block with a nonzero; > 1: none; bench contract --tc-sweep "
                         "measures it)",
                 .alias = "--tc-threshold",
                 .retired_env = "TESSERA_SPTC_TC_THRESHOLD",
                 .expected = "a block density >= 0, or < 0 for the default",
                 .shown = "NUMBER",
                 .valid = [](double v) { return !std::isnan(v); }},
    Knob<cpu::Isa>{.key = "cpu_isa",
                   .field = &Tuning::cpu_isa,
                   .help = "cpu MTTKRP vector instruction set:",
                   .tail = " (refused where the CPU or build lacks it)",
                   .retired_env = "TESSERA_CPU_ISA"},
    Knob<bool>{.key = "trace",
               .field = &Tuning::trace,
               .help = "cuda: per-phase timing lines of each operation on stderr",
               .retired_env = "TESSERA_CUDA_TRACE",
               .bare_flag = true});

/// Calls f(knob) for every knob of kKnobs, in order (f: a generic lambda; the knob's
/// Value type tells enumerations, bools and numbers apart).
template <typename F>
constexpr void for_each_knob(F&& f) {
  std::apply([&](const auto&... k) { (f(k), ...); }, kKnobs);
}

/// True for the knob types with a name table.
template <typename V>
inline constexpr bool kIsChoice = std::is_enum_v<V>;

/// "--" + key with '-' for '_': the knob's CLI flag.
template <typename V>
std::string flag(const Knob<V>& k) {
  std::string s = "--" + std::string(k.key);
  for (char& c : s)
    if (c == '_') c = '-';
  return s;
}

/// The --help text of a knob: for an enumeration its help, its values with their own help
/// ("auto (chosen from the shape) | plain"), and its tail.
template <typename V>
std::string help_text(const Knob<V>& k) {
  if constexpr (!kIsChoice<V>) {
    return std::string(k.help);
  } else {
    std::string s(k.help);
    const char* sep = " ";
    for (const EnumName<V>& n : Names<V>::all) {
      s += sep;
      s += n.name;
      if (!n.help.empty()) s += " (" + std::string(n.help) + ")";
      sep = " | ";
    }
    return s + std::string(k.tail);
  }
}

/// Throws InputError naming the option (its CLI flag) when a field is out of range.
void check(const Tuning& t);

}  // namespace tessera::kernels

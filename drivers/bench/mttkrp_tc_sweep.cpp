// tessera bench mttkrp --tc-sweep (bench.hpp): the tensor-core MTTKRP (issue 18, the hybrid
// layout of kernels::TcSplit) against the CUDA-core kernel. Cases: generated blocky tensors
// (block density x tile fraction, generate_tc_blocky), or the bench's own input (a file, or
// --generate DIMS --nnz N: the same synthetic tensor as bench mttkrp, built on the host).
// Per case, rank R and mode: the median MTTKRP time with the tensor cores off, forced on in
// each precision, and auto; every output against an FP64 reference MTTKRP (cpu backend,
// double, the same tensor and factors converted); the TcSplit of the mode; a roofline of the
// tile kernel and of the rest kernel.
//
// Roofline bytes (T = the value type, N = order, R = rank):
//   tile kernel: tiles * (256 sizeof(T) + (N-1) 4)       the dense tiles and their coordinates
//              + tiles * 16 R sizeof(T)                   the tile_mode factor rows (W)
//              + tiles * (N-2) R sizeof(T)                one row per fixed mode per tile
//              + dims[mode] R sizeof(T)                   the output, once
//   tile flops:  tiles * 2 * 256 * R (x3 for 3xtf32: three TF32 products per product)
//   rest kernel: rest_nnz * (N 4 + sizeof(T)) + rest_nnz * (N-1) R sizeof(T), the no-reuse
//                bound (every nonzero gathers its N-1 factor rows): an UPPER bound of the bytes,
//                so the rest kernel's GB/s printed from it is an upper bound too.
//
// Nominal tensor-core peaks (dense, no sparsity), NVIDIA H100 SXM5: the H100 datasheet
// (https://www.nvidia.com/en-us/data-center/h100/, "Technical Specifications"; mirrored at
// https://archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html) lists FP64 Tensor Core 67
// TFLOPS, TF32 Tensor Core 989 and BF16 Tensor Core 1,979 TFLOPS "shown with sparsity,
// specifications 1/2 lower without sparsity". The constants below are the clock-derived
// values of the same peaks (132 SMs at the boost clock; glennklockwood.com/garden/processors/
// h100): FP64 66.9, TF32 494.7, BF16 989.4 TFLOP/s. The H200 has the same GH100 compute, so
// the same peaks. 3xtf32 is compared with the TF32 peak with its flops counted x3.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <sstream>
#include <type_traits>
#include <unordered_set>

#include "bench/bench.hpp"
#include "bench/harness.hpp"
#include "common.hpp"
#include "io/output.hpp"
#include "kernels/backend.hpp"
#include "kernels/ops/mttkrp.hpp"
#include "run/input.hpp"
#include "tensor/synthetic.hpp"
#include "util/log.hpp"
#include "util/rng.hpp"
#include "util/timer.hpp"

namespace tessera::driver::bench {

namespace {

constexpr double kPeakTf32 = 494.7e12;  ///< H100 SXM5 TF32 tensor core, dense (flop/s)
constexpr double kPeakBf16 = 989.4e12;  ///< H100 SXM5 BF16 tensor core, dense
constexpr double kPeakFp64 = 66.9e12;   ///< H100 SXM5 FP64 tensor core
constexpr double kTargetSpeedup = 1.5;  ///< issue 18's target (t_off / t_tc)

double peak_of(const std::string& precision) {
  if (precision == "bf16") return kPeakBf16;
  if (precision == "fp64") return kPeakFp64;
  return kPeakTf32;  // tf32, 3xtf32
}

/// "0.05,0.125" -> values; each checked by ok() (else InputError naming the option).
template <typename V, typename Ok>
std::vector<V> parse_list(const std::string& s, const char* option, Ok&& ok, const char* what) {
  std::vector<V> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    TESSERA_INPUT_CHECK(end != item.c_str() && *end == '\0' && ok(v),
                        option << ": '" << item << "' is not " << what);
    out.push_back(static_cast<V>(v));
  }
  TESSERA_INPUT_CHECK(!out.empty(), option << " is empty");
  return out;
}

/// One tensor of the sweep: the host tensor, its name and (blocky) its parameters.
template <typename T>
struct SweepCase {
  std::string name;
  double density = -1, fraction = -1;  ///< < 0: not a generated blocky tensor
  std::uint64_t tiles = 0;             ///< generated dense tiles (blocky)
  SparseTensor<T> x;
};

/// ||got - want||_F / ||want||_F, in double.
template <typename T>
double frobenius_error(const std::vector<T>& got, const std::vector<double>& want) {
  double d2 = 0, w2 = 0;
  for (std::size_t k = 0; k < want.size(); ++k) {
    const double g = static_cast<double>(got[k]), w = want[k];
    d2 += (g - w) * (g - w);
    w2 += w * w;
  }
  return w2 > 0 ? std::sqrt(d2 / w2) : std::sqrt(d2);
}

std::string ms(double s) {
  return cell("%.3f", s * 1e3);
}

}  // namespace

template <typename T>
SparseTensor<T> generate_tc_blocky(const std::vector<std::uint64_t>& dims, std::uint64_t nnz,
                                   double density, double fraction, std::uint64_t seed,
                                   std::uint64_t* tiles_out) {
  const int N = static_cast<int>(dims.size());
  TESSERA_INPUT_CHECK(N >= 2 && N <= kMaxOrder, "--tc-dims: order must be 2.." << kMaxOrder);
  TESSERA_INPUT_CHECK(dims[0] >= 16 && dims[1] >= 16,
                      "--tc-dims: the first two modes hold the 16 x 16 tiles and need at least "
                      "16 indices each (found "
                          << format_dims(dims) << ")");
  TESSERA_INPUT_CHECK(density > 0 && density <= 1,
                      "block density " << density << " is not in (0, 1]");
  TESSERA_INPUT_CHECK(fraction >= 0 && fraction <= 1,
                      "tile fraction " << fraction << " is not in [0, 1]");
  const auto per_tile =
      static_cast<std::uint64_t>(std::clamp<long long>(std::llround(density * 256.0), 1, 256));
  const std::uint64_t nb0 = dims[0] / 16, nb1 = dims[1] / 16;
  double positions = static_cast<double>(nb0) * static_cast<double>(nb1);
  for (int m = 2; m < N; ++m) positions *= static_cast<double>(dims[static_cast<std::size_t>(m)]);
  // At most half the tile positions, so that drawing distinct ones ends quickly.
  const auto want_tiles = static_cast<std::uint64_t>(
      std::min(std::round(fraction * static_cast<double>(nnz) / static_cast<double>(per_tile)),
               std::floor(positions / 2)));
  SparseTensor<T> t(dims);
  t.reserve(static_cast<std::size_t>(nnz));
  // Tile positions (i-block, j-block, k, ...), distinct: a position key is the hash of its
  // coordinates; a repeated key (a repeated position, or a 2^-64 hash collision) is redrawn.
  std::unordered_set<std::uint64_t> taken;
  taken.reserve(static_cast<std::size_t>(want_tiles) * 2);
  auto tile_key = [&](const std::uint64_t* pos) {
    std::uint64_t h = seed;
    for (int m = 0; m < N; ++m) h = hash_keys(h, pos[m], static_cast<std::uint64_t>(m));
    return h;
  };
  auto draw = [&](std::uint64_t stream, std::uint64_t id, int m, std::uint64_t n) {
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(hash_keys(
                                           seed, stream, id, static_cast<std::uint64_t>(m))) *
                                       n) >>
                                      64);
  };
  std::uint64_t pos[kMaxOrder];
  index_t c[kMaxOrder];
  std::uint8_t slots[256];
  std::uint64_t tiles = 0, value_id = 0;
  auto value = [&] { return static_cast<T>(0.5 + uniform01(hash_keys(seed, value_id++, 0xFA1))); };
  for (std::uint64_t attempt = 0; tiles < want_tiles; ++attempt) {
    pos[0] = draw(1, attempt, 0, nb0);
    pos[1] = draw(1, attempt, 1, nb1);
    for (int m = 2; m < N; ++m) pos[m] = draw(1, attempt, m, dims[static_cast<std::size_t>(m)]);
    if (!taken.insert(tile_key(pos)).second) continue;
    // per_tile distinct slots of 256: a partial Fisher-Yates shuffle.
    std::iota(slots, slots + 256, std::uint8_t{0});
    for (std::uint64_t s = 0; s < per_tile; ++s) {
      const std::uint64_t r = s + draw(2, tiles, static_cast<int>(s), 256 - s);
      std::swap(slots[s], slots[r]);
      c[0] = static_cast<index_t>(pos[0] * 16 + slots[s] / 16);
      c[1] = static_cast<index_t>(pos[1] * 16 + slots[s] % 16);
      for (int m = 2; m < N; ++m) c[m] = static_cast<index_t>(pos[m]);
      t.push_back(c, value());
    }
    ++tiles;
  }
  if (tiles_out) *tiles_out = tiles;
  // The rest: uniform over the cells outside the tiles (a cell inside a tile is redrawn, so
  // the tiles keep their density); repeated cells are removed and redrawn where the packed
  // coordinates fit 64 bits, else left (their chance is below nnz^2 / 2^58).
  const std::uint64_t rest = nnz > t.vals.size() ? nnz - t.vals.size() : 0;
  double cells = 1;
  for (std::uint64_t n : dims) cells *= static_cast<double>(n);
  TESSERA_INPUT_CHECK(static_cast<double>(rest) <= (cells - 256.0 * static_cast<double>(tiles)) / 2,
                      "--nnz " << nnz << ": " << rest << " nonzeros outside the tiles do not fit "
                               << "in half of the free cells of " << format_dims(dims)
                               << " (use larger --tc-dims or a smaller --nnz)");
  int bits[kMaxOrder], total_bits = 0;
  for (int m = 0; m < N; ++m) {
    bits[m] = std::max(1, static_cast<int>(std::ceil(
                              std::log2(static_cast<double>(dims[static_cast<std::size_t>(m)])))));
    total_bits += bits[m];
  }
  const bool packed = total_bits <= 64;
  std::vector<std::uint64_t> keys;  // packed coordinates, mode 0 in the high bits
  std::uint64_t id = 0;
  auto draw_cell = [&](std::uint64_t* cell) {
    for (;;) {
      for (int m = 0; m < N; ++m) cell[m] = draw(3, id, m, dims[static_cast<std::size_t>(m)]);
      ++id;
      std::uint64_t p[kMaxOrder];
      p[0] = cell[0] / 16;
      p[1] = cell[1] / 16;
      for (int m = 2; m < N; ++m) p[m] = cell[m];
      if (tiles == 0 || !taken.count(tile_key(p))) return;
    }
  };
  auto pack = [&](const std::uint64_t* cell) {
    std::uint64_t k = 0;
    for (int m = 0; m < N; ++m) k = (k << bits[m]) | cell[m];
    return k;
  };
  std::uint64_t cell[kMaxOrder];
  if (packed) {
    while (keys.size() < rest) {
      while (keys.size() < rest) {
        draw_cell(cell);
        keys.push_back(pack(cell));
      }
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    }
    for (std::uint64_t k : keys) {
      for (int m = N - 1; m >= 0; --m) {
        c[m] = static_cast<index_t>(k & ((std::uint64_t{1} << bits[m]) - 1));
        k >>= bits[m];
      }
      t.push_back(c, value());
    }
  } else {
    for (std::uint64_t k = 0; k < rest; ++k) {
      draw_cell(cell);
      for (int m = 0; m < N; ++m) c[m] = static_cast<index_t>(cell[m]);
      t.push_back(c, value());
    }
  }
  return t;
}

template <typename T>
void run_mttkrp_tc_sweep(const BenchArgs& a, const comm::MpiCommunicator& world) {
  {
    io::OutputSet outputs;  // --json checked before any work (io/output.hpp)
    outputs.add_input("the input", a.load.path);
    outputs.add_output("--json", a.run.json, io::OutputKind::record);
    outputs.validate(a.run.force, world);
  }
  const bool blocky = a.load.path.empty() && a.gen_dims.empty();
  std::vector<int> ranks;
  std::vector<double> densities, fractions;
  std::vector<std::uint64_t> tc_dims;
  comm::run_collectively(world, [&] {
    TESSERA_INPUT_CHECK(world.size() == 1,
                        "--tc-sweep runs on one rank (found " << world.size() << ")");
    ranks = parse_list<int>(
        a.ranks.empty() ? "16,32,64,128,256" : a.ranks, "--ranks",
        [](double v) { return v >= 1 && v <= 4096 && v == std::floor(v); }, "a rank R in 1..4096");
    if (blocky) {
      densities = parse_list<double>(
          a.tc_densities, "--tc-densities", [](double v) { return v > 0 && v <= 1; },
          "a block density in (0, 1]");
      fractions = parse_list<double>(
          a.tc_fractions, "--tc-fractions", [](double v) { return v >= 0 && v <= 1; },
          "a tile fraction in [0, 1]");
      tc_dims = parse_dims(a.tc_dims, "--tc-dims");
    }
  });
  auto cx = make_compute<T>(a.run, world);
  PeakSampler peaks(cx.kind == kernels::BackendKind::cuda);
  kernels::Backend<T>& be = *cx.backend;
  const kernels::Tuning user = be.tuning();
  const bool cuda = cx.kind == kernels::BackendKind::cuda;
  const double bw = bench_bandwidth(a, be);
  const bool bw_given = !a.bandwidth.empty();
  auto ref_be = kernels::make_backend<double>(kernels::BackendKind::cpu, a.run.threads);
  const std::vector<std::string> precs = std::is_same_v<T, float>
                                             ? std::vector<std::string>{"3xtf32", "tf32", "bf16"}
                                             : std::vector<std::string>{"fp64"};
  log_setup("mttkrp --tc-sweep", kernels::to_string(cx.kind), world.size(), a.run.threads,
            a.run.precision, "", bw, bw_given);
  if (!cuda)
    std::printf(
        "bench mttkrp --tc-sweep: the tensor-core sweep needs the cuda backend (backend %s has "
        "no tensor-core split); printing only the tensor-cores-off times and their error "
        "against the FP64 reference\n",
        kernels::to_string(cx.kind).c_str());

  // The cases, made one at a time (a case's host tensor lives only while it is measured).
  std::vector<std::pair<double, double>> grid;  // (density, fraction); one entry (-1, -1)
  if (blocky) {
    for (double d : densities)
      for (double f : fractions) grid.push_back({d, f});
  } else {
    grid.push_back({-1, -1});
  }
  const std::uint64_t blocky_nnz = a.gen_nnz > 0 ? static_cast<std::uint64_t>(a.gen_nnz) : 20000000;
  auto make_case = [&](double d, double f) {
    SweepCase<T> sc;
    sc.density = d;
    sc.fraction = f;
    Timer t;
    if (blocky) {
      sc.name = "blocky";
      sc.x = generate_tc_blocky<T>(tc_dims, blocky_nnz, d, f, a.tc_seed, &sc.tiles);
    } else if (!a.load.path.empty()) {
      // The file's name without its folder and its .tns / .tns.gz / .h5 suffix.
      std::string p = a.load.path.substr(a.load.path.find_last_of('/') + 1);
      for (const char* ext : {".gz", ".tns", ".h5"})
        if (p.size() > std::strlen(ext) && p.ends_with(ext)) p.resize(p.size() - std::strlen(ext));
      sc.name = p;
      sc.x = load_and_distribute<T>(a.load, partition::Scheme::nnz, world, nullptr).block;
    } else {  // --generate: bench mttkrp's synthetic tensor (input.cpp), built on the host
      synthetic::Spec spec;
      const auto dims = parse_dims(a.gen_dims);
      TESSERA_INPUT_CHECK(dims.size() >= 1 && dims.size() <= static_cast<std::size_t>(kMaxOrder),
                          "--generate: order must be 1.." << kMaxOrder);
      spec.order = static_cast<int>(dims.size());
      for (int n = 0; n < spec.order; ++n) spec.dims[n] = dims[static_cast<std::size_t>(n)];
      spec.powerlaw = a.dist == "powerlaw";
      spec.alpha = a.alpha;
      spec.rank = 4;
      spec.seed = 1;
      sc.name = "gen:" + a.gen_dims;
      sc.x = kernels::make_synthetic_tensor<T>(spec, 0, static_cast<std::uint64_t>(a.gen_nnz));
    }
    log::info("tc sweep: tensor " + sc.name + " " + format_dims(sc.x.dims) + ", " +
              std::to_string(sc.x.nnz()) + " nonzeros, made in " + std::to_string(t.seconds()) +
              " s");
    return sc;
  };

  const Table table({{"tensor", 16, true}, {"d", 6},          {"frac", 5},      {"R", 4},
                     {"mode", 4},          {"prec", 6, true}, {"tc_frac", 7},   {"tiles", 9},
                     {"pad", 5},           {"t_off_ms", 9},   {"t_tc_ms", 9},   {"speedup", 7},
                     {"pred", 5},          {"t_auto_ms", 9},  {"auto_used", 9}, {"err_off", 8},
                     {"err_tc", 8},        {"tile_ms", 8},    {"rest_ms", 8},   {"tile_GBs", 8},
                     {"tile_TFLOPs", 11},  {"floor_ms", 9},   {"off/fl", 6},    {"tc/fl", 6}});
  std::printf(
      "MTTKRP tensor-core sweep, %s, %s: median of %d interleaved runs per cell (ms); speedup = "
      "t_off / t_tc; errors: ||M - M_ref||_F / ||M_ref||_F against an FP64 MTTKRP (cpu backend); "
      "tile_GBs / tile_TFLOPs: the tile kernel's roofline bytes and flops over tile_ms; floor_ms: "
      "the MTTKRP's floor (its stored format once, each touched factor row once, the output "
      "once) over the copy bandwidth, off/fl and tc/fl the times over it\n",
      kernels::to_string(cx.kind).c_str(), a.run.precision.c_str(), a.repeat);
  table.header();
  flush();
  nlohmann::json rows = nlohmann::json::array(), cases = nlohmann::json::array();
  double off_sum = 0;
  int off_count = 0;
  std::map<std::string, double> best;  // precision -> best speedup
  const double sz = static_cast<double>(sizeof(T));
  for (const auto& [d, f] : grid) {
    SweepCase<T> sc = make_case(d, f);
    const auto dims = sc.x.dims;
    const int N = sc.x.order();
    const double nnz = static_cast<double>(sc.x.nnz());
    kernels::Tuning on = user;
    on.tensor_cores = kernels::TensorCores::on;
    be.set_tuning(on);  // the hybrid layout is built at prepare when tensor_cores != off
    Timer tp;
    auto X = be.prepare(sc.x);
    be.synchronize();
    const double prepare_s = tp.seconds();
    std::unique_ptr<kernels::TensorHandle<double>> X64;
    {
      const SparseTensor<double> x64 = sc.x.template cast<double>();
      X64 = ref_be->prepare(x64);
    }
    sc.x = SparseTensor<T>();                                // the handles keep what they need
    const std::vector<double> distinct = distinct_rows(*X);  // the floor's gathered rows
    nlohmann::json cj = {{"tensor", sc.name},
                         {"dims", dims},
                         {"nnz", nnz},
                         {"prepare_seconds", prepare_s},
                         {"stored_bytes", X->bytes()}};
    if (sc.density >= 0) {
      cj["density"] = sc.density;
      cj["tile_fraction"] = sc.fraction;
      cj["generated_tiles"] = sc.tiles;
    }
    cj["tc_split"] = tc_split_json(X->tc_split());
    cases.push_back(cj);
    std::uint64_t max_rows = 1;
    for (std::uint64_t n : dims) max_rows = std::max(max_rows, n);
    for (int R : ranks) {
      std::vector<kernels::Array<T>> F;
      std::vector<kernels::Array<double>> F64;
      std::vector<const T*> fp;
      std::vector<const double*> fp64;
      for (int n = 0; n < N; ++n) {
        const auto h = bench_factor_values<T>(dims[static_cast<std::size_t>(n)], R, n);
        F.push_back(be.allocate(h.size()));
        be.upload(h.data(), h.size(), F.back().data());
        const std::vector<double> h64(h.begin(), h.end());
        F64.push_back(ref_be->allocate(h64.size()));
        ref_be->upload(h64.data(), h64.size(), F64.back().data());
      }
      for (auto& x : F) fp.push_back(x.data());
      for (auto& x : F64) fp64.push_back(x.data());
      const std::size_t out_n = static_cast<std::size_t>(max_rows) * static_cast<std::size_t>(R);
      auto out = be.allocate(out_n);
      auto out64 = ref_be->allocate(out_n);
      for (int mode = 0; mode < N; ++mode) {
        const std::size_t n_out = static_cast<std::size_t>(dims[static_cast<std::size_t>(mode)]) *
                                  static_cast<std::size_t>(R);
        const double floor_s = mttkrp_floor_bytes(static_cast<double>(X->mttkrp_stream_bytes(mode)),
                                                  distinct, dims, mode, R, sizeof(T)) /
                               bw;
        kernels::ops::mttkrp(*ref_be, *X64, mode, fp64, R, out64.data());
        std::vector<double> want(n_out);
        ref_be->download(out64.data(), n_out, want.data());
        std::vector<T> got(n_out);
        // The mode's tunings (off, auto on cuda, then on in each precision), timed
        // interleaved: round k runs each tuning once, in an order rotated by k, so a drift
        // of the card's clock or temperature over the rounds falls on every tuning alike
        // and the ratios (speedup, auto/off) compare runs taken side by side. Per tuning:
        // the median over --repeat rounds; its output against the reference and the mode's
        // split after a last, untimed run.
        struct Timed {
          double seconds = 0, err = 0;
          kernels::TcSplit split;
        };
        std::vector<kernels::Tuning> tunings;
        tunings.push_back(user);
        tunings.back().tensor_cores = kernels::TensorCores::off;
        if (cuda) {
          tunings.push_back(user);
          tunings.back().tensor_cores = kernels::TensorCores::automatic;
          for (const std::string& p : precs) {
            tunings.push_back(user);
            tunings.back().tensor_cores = kernels::TensorCores::on;
            tunings.back().tc_precision = *kernels::parse_name<kernels::TcPrecisionOption>(p);
          }
        }
        auto call = [&] { kernels::ops::mttkrp(be, *X, mode, fp, R, out.data()); };
        // Short kernels (tens of microseconds) are timed in batches of back-to-back calls
        // of at least a millisecond, so launch and host-timer noise stay under 1%.
        std::vector<int> batch(tunings.size());
        for (std::size_t k = 0; k < tunings.size(); ++k) {
          be.set_tuning(tunings[k]);
          const double once = median_seconds(world, 1, 1, call, [&] { be.synchronize(); });
          batch[k] = static_cast<int>(std::clamp(1e-3 / std::max(once, 1e-9), 1.0, 200.0));
        }
        std::vector<std::vector<double>> runs(tunings.size());
        for (int round = 0; round < a.repeat; ++round) {
          for (std::size_t i = 0; i < tunings.size(); ++i) {
            const std::size_t k = (i + static_cast<std::size_t>(round)) % tunings.size();
            be.set_tuning(tunings[k]);
            runs[k].push_back(median_seconds(
                                  world, 0, 1,
                                  [&] {
                                    for (int b = 0; b < batch[k]; ++b) call();
                                  },
                                  [&] { be.synchronize(); }) /
                              batch[k]);
          }
        }
        std::vector<Timed> timed(tunings.size());
        for (std::size_t k = 0; k < tunings.size(); ++k) {
          std::sort(runs[k].begin(), runs[k].end());
          timed[k].seconds = runs[k][runs[k].size() / 2];
          be.set_tuning(tunings[k]);
          call();
          be.synchronize();
          be.download(out.data(), n_out, got.data());
          timed[k].err = frobenius_error(got, want);
          for (const auto& s : X->tc_split())
            if (s.mode == mode) timed[k].split = s;
        }
        const Timed& t_off = timed[0];
        off_sum += t_off.seconds;
        ++off_count;
        const Timed t_auto = cuda ? timed[1] : Timed{};
        const std::string dcell = sc.density >= 0 ? cell("%.3g", sc.density) : "-";
        const std::string fcell = sc.fraction >= 0 ? cell("%.2g", sc.fraction) : "-";
        auto base_row = [&](const std::string& prec) {
          nlohmann::json row = {{"tensor", sc.name},
                                {"dims", dims},
                                {"nnz", nnz},
                                {"R", R},
                                {"mode", mode},
                                {"precision", prec},
                                {"value_type", std::is_same_v<T, float> ? "float" : "double"},
                                {"t_off_seconds", t_off.seconds},
                                {"err_off", t_off.err},
                                {"floor_seconds", floor_s},
                                {"off_ratio_to_floor", floor_s > 0 ? t_off.seconds / floor_s : 0}};
          row["density"] = sc.density >= 0 ? nlohmann::json(sc.density) : nlohmann::json();
          row["tile_fraction"] = sc.fraction >= 0 ? nlohmann::json(sc.fraction) : nlohmann::json();
          if (cuda) {
            row["t_auto_seconds"] = t_auto.seconds;
            row["auto_used"] = t_auto.split.used;
            row["err_auto"] = t_auto.err;
          }
          return row;
        };
        if (!cuda) {
          table.row({sc.name,
                     dcell,
                     fcell,
                     cell("%d", R),
                     cell("%d", mode),
                     "off",
                     "-",
                     "-",
                     "-",
                     ms(t_off.seconds),
                     "-",
                     "-",
                     "-",
                     "-",
                     "-",
                     cell("%.1e", t_off.err),
                     "-",
                     "-",
                     "-",
                     "-",
                     "-",
                     ms(floor_s),
                     cell("%.2f", floor_s > 0 ? t_off.seconds / floor_s : 0),
                     "-"});
          rows.push_back(base_row("off"));
          continue;
        }
        for (std::size_t pi = 0; pi < precs.size(); ++pi) {
          const std::string& p = precs[pi];
          const Timed& r = timed[2 + pi];
          const kernels::TcSplit& s = r.split;
          const double tiles = static_cast<double>(s.tiles);
          const double rest_nnz = std::max(0.0, nnz - static_cast<double>(s.tile_nnz));
          const double out_bytes =
              static_cast<double>(dims[static_cast<std::size_t>(mode)]) * R * sz;
          const double tile_bytes = tiles * (256 * sz + (N - 1) * 4.0) + tiles * 16 * R * sz +
                                    tiles * std::max(0, N - 2) * R * sz + out_bytes;
          const double tile_flops = tiles * 2 * 256 * R * (p == "3xtf32" ? 3 : 1);
          const double rest_bytes = rest_nnz * (N * 4.0 + sz) + rest_nnz * (N - 1) * R * sz;
          const double tile_bps = s.tile_seconds > 0 ? tile_bytes / s.tile_seconds : 0;
          const double tile_fps = s.tile_seconds > 0 ? tile_flops / s.tile_seconds : 0;
          const double speedup = r.seconds > 0 ? t_off.seconds / r.seconds : 0;
          best[p] = std::max(best[p], speedup);
          table.row({sc.name,
                     dcell,
                     fcell,
                     cell("%d", R),
                     cell("%d", mode),
                     p,
                     cell("%.3f", s.fraction),
                     cell("%llu", static_cast<unsigned long long>(s.tiles)),
                     cell("%.2f", s.padding),
                     ms(t_off.seconds),
                     ms(r.seconds),
                     cell("%.2f", speedup),
                     cell("%.2f", s.predicted_speedup),
                     ms(t_auto.seconds),
                     t_auto.split.used ? "yes" : "no",
                     cell("%.1e", t_off.err),
                     cell("%.1e", r.err),
                     ms(s.tile_seconds),
                     ms(s.rest_seconds),
                     cell("%.1f", tile_bps / 1e9),
                     cell("%.2f", tile_fps / 1e12),
                     ms(floor_s),
                     cell("%.2f", floor_s > 0 ? t_off.seconds / floor_s : 0),
                     cell("%.2f", floor_s > 0 ? r.seconds / floor_s : 0)});
          nlohmann::json row = base_row(p);
          row["t_tc_seconds"] = r.seconds;
          row["tc_ratio_to_floor"] = floor_s > 0 ? r.seconds / floor_s : 0;
          row["speedup"] = speedup;
          row["err_tc"] = r.err;
          row["tc_split"] = tc_split_json({s})[0];
          row["roofline"] = {
              {"tile_bytes", tile_bytes},
              {"tile_flops", tile_flops},
              {"tile_intensity_flops_per_byte", tile_bytes > 0 ? tile_flops / tile_bytes : 0},
              {"tile_bytes_per_s", tile_bps},
              {"tile_flops_per_s", tile_fps},
              {"peak_flops_per_s", peak_of(p)},
              {"rest_nnz", rest_nnz},
              {"rest_bytes_noreuse_upper_bound", rest_bytes},
              {"rest_bytes_per_s_upper_bound",
               s.rest_seconds > 0 ? rest_bytes / s.rest_seconds : 0},
              {"bandwidth_bytes_per_s", bw}};
          rows.push_back(row);
        }
      }
      flush();
    }
  }
  be.set_tuning(user);
  peaks.stop();
  // No memory plan: the sweep makes, times and frees one case at a time (the largest case's
  // stored bytes are in its record), so its measured peaks are printed alone.
  std::printf("memory: host peak %s, device peak %s measured (no plan: one case at a time)\n",
              human_bytes(static_cast<double>(peaks.host_peak())).c_str(),
              human_bytes(static_cast<double>(peaks.device_peak())).c_str());
  std::printf("%s bandwidth: %.1f GB/s", bw_given ? "given" : "measured", bw / 1e9);
  if (cuda)
    std::printf(
        "; nominal tensor-core peaks (H100 SXM5, dense): TF32 %.1f, BF16 %.1f, FP64 %.1f "
        "TFLOP/s (3xtf32 flops counted x3 against TF32)",
        kPeakTf32 / 1e12, kPeakBf16 / 1e12, kPeakFp64 / 1e12);
  std::printf("\n");
  for (const auto& [p, s] : best)
    std::printf("best speedup %s: %.2f (target %.2f: %s)\n", p.c_str(), s, kTargetSpeedup,
                s >= kTargetSpeedup ? "met" : "missed");
  std::fflush(stdout);
  nlohmann::json j;
  bandwidth_record(j, bw, bw_given);
  j["precision"] = a.run.precision;
  j["repeat"] = a.repeat;
  j["ranks"] = ranks;
  // The "mode" unit of bench mttkrp: the mean over cases, ranks and modes of the off time.
  const double per_mode = off_count ? off_sum / off_count : 0;
  j["timing"] = timing_record("mode", per_mode, {{"kernel", per_mode}});
  j["tc_sweep"] = {{"backend", kernels::to_string(cx.kind)},
                   {"needs_cuda", !cuda},
                   {"precisions", cuda ? precs : std::vector<std::string>{"off"}},
                   {"target_speedup", kTargetSpeedup},
                   {"bandwidth_bytes_per_s", bw},
                   {"peak_flops_per_s",
                    {{"tf32", kPeakTf32},
                     {"3xtf32", kPeakTf32},
                     {"bf16", kPeakBf16},
                     {"fp64", kPeakFp64},
                     {"card", "H100 SXM5 nominal, dense"}}},
                   {"rest_bytes_model",
                    "no-reuse upper bound: rest_nnz * (order 4 + sizeof(T)) "
                    "+ rest_nnz (order-1) R sizeof(T)"},
                   {"cases", cases},
                   {"rows", rows}};
  if (blocky) {
    j["tc_sweep"]["generator"] = {{"dims", tc_dims},
                                  {"nnz", blocky_nnz},
                                  {"seed", a.tc_seed},
                                  {"densities", densities},
                                  {"tile_fractions", fractions}};
  }
  write_record(a.run.json, "bench mttkrp", j, world, kernels::to_string(cx.kind), a.run.threads,
               cx.backend->tuning(), peaks.device_peak());
}

#define TESSERA_BENCH_TC_SWEEP(T)                                                                  \
  template SparseTensor<T> generate_tc_blocky<T>(const std::vector<std::uint64_t>&, std::uint64_t, \
                                                 double, double, std::uint64_t, std::uint64_t*);   \
  template void run_mttkrp_tc_sweep<T>(const BenchArgs&, const comm::MpiCommunicator&);
TESSERA_BENCH_TC_SWEEP(float)
TESSERA_BENCH_TC_SWEEP(double)
#undef TESSERA_BENCH_TC_SWEEP

}  // namespace tessera::driver::bench

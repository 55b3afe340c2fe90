#include "algo/generate.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <utility>

#include "tensor/synthetic.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace tessera::algo {

IndexDist parse_index_dist(const std::string& s) {
  if (s == "uniform") return IndexDist::uniform;
  if (s == "powerlaw" || s == "power-law" || s == "zipf") return IndexDist::powerlaw;
  TESSERA_INPUT_CHECK(false,
                      "unknown index distribution '" << s << "': expected uniform or powerlaw");
  return IndexDist::uniform;
}

Structure parse_structure(const std::string& s) {
  if (s == "blocks" || s == "lowrank") return Structure::blocks;
  if (s == "sampled") return Structure::sampled;
  TESSERA_INPUT_CHECK(false, "unknown structure '" << s << "': expected blocks or sampled");
  return Structure::blocks;
}

namespace {

using synthetic::kNoise;
using synthetic::kSupport;

synthetic::Spec to_spec(const GenerateOptions& o) {
  synthetic::Spec s;
  s.order = static_cast<int>(o.dims.size());
  for (int n = 0; n < s.order; ++n) s.dims[n] = o.dims[static_cast<std::size_t>(n)];
  s.powerlaw = o.dist == IndexDist::powerlaw;
  s.alpha = o.alpha;
  s.rank = o.rank;
  s.seed = o.seed;
  return s;
}

std::uint64_t coord_hash(const index_t* c, int order) {
  std::uint64_t h = 0x243F6A8885A308D3ull;
  for (int n = 0; n < order; ++n) h = mix64(h ^ c[n]);
  return h;
}

/// Exact low-rank blocks: supports per (component, mode).
struct Blocks {
  std::vector<std::vector<std::vector<index_t>>> support;  // [r][n] -> sorted distinct indices
  std::vector<std::int64_t> count;                         // entries of component r
  // [n]: index -> list of (component, factor value)
  std::vector<std::unordered_map<index_t, std::vector<std::pair<int, double>>>> lookup;
};

Blocks make_blocks(const GenerateOptions& o) {
  const synthetic::Spec spec = to_spec(o);
  const int N = static_cast<int>(o.dims.size());
  Blocks b;
  const double per = std::max(1.0, static_cast<double>(o.nnz) / o.rank);
  // Support sizes: as equal as possible, clamped to the mode lengths.
  std::vector<int> order(static_cast<std::size_t>(N));
  for (int n = 0; n < N; ++n) order[static_cast<std::size_t>(n)] = n;
  std::sort(order.begin(), order.end(), [&](int a, int c) {
    return o.dims[static_cast<std::size_t>(a)] < o.dims[static_cast<std::size_t>(c)];
  });
  std::vector<std::uint64_t> s(static_cast<std::size_t>(N));
  double remaining = per;
  for (int k = 0; k < N; ++k) {
    const int n = order[static_cast<std::size_t>(k)];
    double want = std::pow(remaining, 1.0 / (N - k));
    auto sz = static_cast<std::uint64_t>(std::llround(std::max(1.0, want)));
    sz = std::min<std::uint64_t>(sz, o.dims[static_cast<std::size_t>(n)]);
    s[static_cast<std::size_t>(n)] = sz;
    remaining /= static_cast<double>(sz);
  }
  b.support.resize(static_cast<std::size_t>(o.rank));
  b.lookup.resize(static_cast<std::size_t>(N));
  for (int r = 0; r < o.rank; ++r) {
    auto& sup = b.support[static_cast<std::size_t>(r)];
    sup.resize(static_cast<std::size_t>(N));
    std::int64_t cnt = 1;
    for (int n = 0; n < N; ++n) {
      auto& v = sup[static_cast<std::size_t>(n)];
      const std::uint64_t want = s[static_cast<std::size_t>(n)];
      // Draw until `want` distinct indices (bounded attempts; skewed draws repeat often).
      std::vector<index_t> seen;
      for (std::uint64_t j = 0; seen.size() < want && j < 64 * want + 64; ++j) {
        index_t i =
            synthetic::draw_index(spec, n,
                                  hash_keys(o.seed ^ kSupport, static_cast<std::uint64_t>(r),
                                            static_cast<std::uint64_t>(n), j));
        seen.push_back(i);
        if ((j & 63) == 63 || seen.size() >= want) {
          std::sort(seen.begin(), seen.end());
          seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
        }
      }
      std::sort(seen.begin(), seen.end());
      seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
      if (seen.size() > want) seen.resize(want);
      v = std::move(seen);
      cnt *= static_cast<std::int64_t>(v.size());
      for (index_t i : v)
        b.lookup[static_cast<std::size_t>(n)][i].push_back(
            {r, synthetic::factor_value(spec, n, i, r)});
    }
    b.count.push_back(cnt);
  }
  return b;
}

double block_value(const Blocks& b, const index_t* c, int N) {
  const auto it0 = b.lookup[0].find(c[0]);
  if (it0 == b.lookup[0].end()) return 0;
  double sum = 0;
  for (const auto& [r, v0] : it0->second) {
    double p = v0;
    for (int n = 1; n < N && p != 0; ++n) {
      const auto it = b.lookup[static_cast<std::size_t>(n)].find(c[n]);
      double f = 0;
      if (it != b.lookup[static_cast<std::size_t>(n)].end())
        for (const auto& [rr, v] : it->second)
          if (rr == r) f = v;
      p *= f;
    }
    sum += p;
  }
  return sum;
}

/// Throws InputError for options no generator takes (order, dims, nnz, rank, noise, alpha).
void check_generate_options(const GenerateOptions& o) {
  const int N = static_cast<int>(o.dims.size());
  TESSERA_INPUT_CHECK(N >= 1 && N <= kMaxOrder,
                      "generate: order must be 1.." << kMaxOrder << " (got " << N << ")");
  for (auto d : o.dims)
    TESSERA_INPUT_CHECK(d >= 1 && d <= (std::uint64_t(1) << 32),
                        "generate: every dimension must be in 1..2^32");
  TESSERA_INPUT_CHECK(o.nnz >= 1, "generate: --nnz must be at least 1");
  TESSERA_INPUT_CHECK(o.rank >= 1, "generate: --rank must be at least 1");
  TESSERA_INPUT_CHECK(o.noise >= 0 && std::isfinite(o.noise), "generate: --noise must be >= 0");
  TESSERA_INPUT_CHECK(o.alpha > 0 && o.alpha < 1e300,
                      "generate: --alpha must be > 0 (got " << o.alpha << ")");
}

}  // namespace

partition::Distributed<double> generate(const GenerateOptions& o, const comm::Communicator& c,
                                        GenerateInfo* info) {
  const int N = static_cast<int>(o.dims.size());
  check_generate_options(o);

  const int P = c.size(), me = c.rank();
  const synthetic::Spec spec = to_spec(o);
  Blocks blocks;
  std::int64_t total = o.nnz;
  std::vector<std::int64_t> prefix;
  if (o.structure == Structure::blocks) {
    blocks = make_blocks(o);
    prefix.assign(1, 0);
    for (auto k : blocks.count) prefix.push_back(prefix.back() + k);
    total = prefix.back();
  }
  const std::int64_t lo = total * me / P, hi = total * (me + 1) / P;

  // This rank's share of the entries, with value 1 so that distribute() counts repeats.
  SparseTensor<double> local(o.dims);
  const auto count = static_cast<std::size_t>(hi - lo);
  for (auto& v : local.idx) v.resize(count);
  local.vals.assign(count, 1.0);
#pragma omp parallel for schedule(static)
  for (std::int64_t id = lo; id < hi; ++id) {
    const auto k = static_cast<std::size_t>(id - lo);
    if (o.structure == Structure::blocks) {
      const auto r =
          static_cast<int>(std::upper_bound(prefix.begin(), prefix.end(), id) - prefix.begin() - 1);
      std::int64_t off = id - prefix[static_cast<std::size_t>(r)];
      const auto& sup = blocks.support[static_cast<std::size_t>(r)];
      for (int n = N - 1; n >= 0; --n) {
        const auto& v = sup[static_cast<std::size_t>(n)];
        const auto sz = static_cast<std::int64_t>(v.size());
        local.idx[static_cast<std::size_t>(n)][k] = v[static_cast<std::size_t>(off % sz)];
        off /= sz;
      }
    } else {
      for (int n = 0; n < N; ++n)
        local.idx[static_cast<std::size_t>(n)][k] =
            synthetic::coordinate(spec, static_cast<std::uint64_t>(id), n);
    }
  }
  auto d = partition::distribute(std::move(local), partition::Scheme::nnz, {}, c);

  // Values are a function of the coordinate alone, so repeats carry no information.
  double sig2 = 0;
  auto& x = d.block;
#pragma omp parallel for schedule(static) reduction(+ : sig2)
  for (nnz_t k = 0; k < x.nnz(); ++k) {
    index_t cc[kMaxOrder];
    for (int n = 0; n < N; ++n)
      cc[n] = x.idx[static_cast<std::size_t>(n)][static_cast<std::size_t>(k)];
    double v = 0;
    if (o.structure == Structure::blocks) {
      v = block_value(blocks, cc, N);
    } else {
      v = synthetic::model_value(spec, cc);
    }
    x.vals[static_cast<std::size_t>(k)] = v;
    sig2 += v * v;
  }
  double sums[2] = {sig2, static_cast<double>(x.nnz())};
  c.allreduce(sums, 2);
  double noise2 = 0;
  if (o.noise > 0 && sums[1] > 0) {
    const double sigma = o.noise * std::sqrt(sums[0] / sums[1]);
#pragma omp parallel for schedule(static) reduction(+ : noise2)
    for (nnz_t k = 0; k < x.nnz(); ++k) {
      index_t cc[kMaxOrder];
      for (int n = 0; n < N; ++n)
        cc[n] = x.idx[static_cast<std::size_t>(n)][static_cast<std::size_t>(k)];
      const std::uint64_t h = coord_hash(cc, N);
      const double e =
          sigma * normal01(hash_keys(o.seed ^ kNoise, h, 1), hash_keys(o.seed ^ kNoise, h, 2));
      x.vals[static_cast<std::size_t>(k)] += e;
      noise2 += e * e;
    }
    c.allreduce(&noise2, 1);
  }
  if (info) {
    info->nnz = d.dist.global_nnz;
    info->repeats = d.dist.duplicates;
    info->signal_norm = std::sqrt(sums[0]);
    info->noise_norm = std::sqrt(noise2);
  }
  return d;
}

// ---- streaming entries --------------------------------------------------------------------

struct EntryGenerator::Impl {
  GenerateOptions o;
  synthetic::Spec spec;
  Blocks blocks;
  std::vector<std::int64_t> prefix;  // blocks: first id of component r
  std::int64_t total = 0;
  double sigma = 0;
};

EntryGenerator::EntryGenerator(const GenerateOptions& o) : impl_(std::make_unique<Impl>()) {
  const int N = static_cast<int>(o.dims.size());
  check_generate_options(o);
  Impl& m = *impl_;
  m.o = o;
  m.spec = to_spec(o);
  m.total = o.nnz;
  if (o.structure == Structure::blocks) {
    m.blocks = make_blocks(o);
    m.prefix.assign(1, 0);
    for (auto k : m.blocks.count) m.prefix.push_back(m.prefix.back() + k);
    m.total = m.prefix.back();
  }
  if (o.noise > 0) {
    // RMS of the signal over ids spread evenly across [0, total).
    // Summed in 64 fixed parts, added in order: sigma, and so every noisy value, does not
    // depend on the number of threads.
    const std::int64_t S = std::min<std::int64_t>(m.total, std::int64_t(1) << 20);
    constexpr int kParts = 64;
    double part[kParts] = {};
#pragma omp parallel for schedule(dynamic, 1)
    for (int q = 0; q < kParts; ++q) {
      for (std::int64_t j = S * q / kParts; j < S * (q + 1) / kParts; ++j) {
        const auto id = static_cast<std::int64_t>(static_cast<__int128>(m.total) * j / S);
        index_t c[kMaxOrder];
        index_t* p[kMaxOrder];
        for (int n = 0; n < N; ++n) p[n] = &c[n];
        double v = 0;
        fill(id, 1, p, &v);
        part[q] += v * v;
      }
    }
    double sum2 = 0;
    for (double x : part) sum2 += x;
    m.sigma = o.noise * std::sqrt(sum2 / static_cast<double>(S));
  }
}

EntryGenerator::~EntryGenerator() = default;

std::int64_t EntryGenerator::total() const {
  return impl_->total;
}

double EntryGenerator::noise_sigma() const {
  return impl_->sigma;
}

double EntryGenerator::noise01(std::int64_t id) const {
  const std::uint64_t s = impl_->o.seed ^ kNoise;
  return normal01(hash_keys(s, static_cast<std::uint64_t>(id), 3),
                  hash_keys(s, static_cast<std::uint64_t>(id), 4));
}

void EntryGenerator::fill(std::int64_t first, std::int64_t count, index_t* const* idx,
                          double* vals) const {
  const Impl& m = *impl_;
  const int N = static_cast<int>(m.o.dims.size());
  const bool blocks = m.o.structure == Structure::blocks;
  TESSERA_EXPECTS(first >= 0 && count >= 0 && (!blocks || first + count <= m.total),
                  "entries [" << first << ", " << first + count << ") of " << m.total);
#pragma omp parallel for schedule(static) if (count > 4096)
  for (std::int64_t k = 0; k < count; ++k) {
    const std::int64_t id = first + k;
    index_t c[kMaxOrder];
    if (blocks) {
      const auto r = static_cast<int>(std::upper_bound(m.prefix.begin(), m.prefix.end(), id) -
                                      m.prefix.begin() - 1);
      std::int64_t off = id - m.prefix[static_cast<std::size_t>(r)];
      const auto& sup = m.blocks.support[static_cast<std::size_t>(r)];
      double v = 1;
      for (int n = N - 1; n >= 0; --n) {
        const auto& s = sup[static_cast<std::size_t>(n)];
        const auto sz = static_cast<std::int64_t>(s.size());
        c[n] = s[static_cast<std::size_t>(off % sz)];
        off /= sz;
        v *= synthetic::factor_value(m.spec, n, c[n], r);
      }
      vals[k] = v;
    } else {
      for (int n = 0; n < N; ++n)
        c[n] = synthetic::coordinate(m.spec, static_cast<std::uint64_t>(id), n);
      vals[k] = synthetic::model_value(m.spec, c);
    }
    for (int n = 0; n < N; ++n) idx[n][k] = c[n];
  }
}

}  // namespace tessera::algo

// The generated inputs of `tessera bench contract --generate` (contract.hpp): uniform or
// blocky random coordinates for the spec, the letters' lengths chosen for the expected
// products.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "bench/contract.hpp"
#include "util/rng.hpp"

namespace tessera::driver::bench {

namespace {

/// Rank `rank` of P's share of `nnz` generated nonzeros, the ids [lo, hi) of an even split:
/// nonzero k is id lo + k, its coordinates set by coords(t.idx, k, id) and its value
/// 0.5 + uniform01(hash of id) (in parallel over k).
template <typename T, typename Coords>
SparseTensor<T> generate_ids(const std::vector<std::uint64_t>& dims, std::uint64_t nnz,
                             std::uint64_t seed, int rank, int P, Coords&& coords) {
  const auto lo = static_cast<std::uint64_t>(static_cast<unsigned __int128>(nnz) * rank / P);
  const auto hi = static_cast<std::uint64_t>(static_cast<unsigned __int128>(nnz) * (rank + 1) / P);
  SparseTensor<T> t(dims);
  const auto n = static_cast<std::int64_t>(hi - lo);
  for (auto& v : t.idx) v.resize(static_cast<std::size_t>(n));
  t.vals.resize(static_cast<std::size_t>(n));
#pragma omp parallel for schedule(static)
  for (std::int64_t k = 0; k < n; ++k) {
    const std::uint64_t id = lo + static_cast<std::uint64_t>(k);
    coords(t.idx, static_cast<std::size_t>(k), id);
    t.vals[static_cast<std::size_t>(k)] =
        static_cast<T>(0.5 + uniform01(hash_keys(seed, id, 0xFA1ull)));
  }
  return t;
}

}  // namespace

template <typename T>
SparseTensor<T> generate_share(const std::string& sub, const std::map<char, std::uint64_t>& len,
                               std::uint64_t nnz, std::uint64_t seed, int rank, int P) {
  std::vector<std::uint64_t> dims;
  for (char c : sub) dims.push_back(len.at(c));
  const int N = static_cast<int>(dims.size());
  return generate_ids<T>(dims, nnz, seed, rank, P, [&](auto& idx, std::size_t k, std::uint64_t id) {
    for (int m = 0; m < N; ++m) {
      const std::uint64_t h = hash_keys(seed, id, static_cast<std::uint64_t>(m));
      idx[static_cast<std::size_t>(m)][k] = static_cast<index_t>(
          (static_cast<unsigned __int128>(h) * dims[static_cast<std::size_t>(m)]) >> 64);
    }
  });
}

template <typename T>
SparseTensor<T> generate_blocky_share(const std::string& sub,
                                      const std::map<char, std::uint64_t>& len, std::uint64_t nnz,
                                      std::uint64_t seed, int rank, int P, std::uint64_t B,
                                      double D) {
  using u128 = unsigned __int128;
  std::vector<std::uint64_t> dims, ext, nblk;
  u128 cells = 1;
  for (char c : sub) {
    dims.push_back(len.at(c));
    ext.push_back(std::min<std::uint64_t>(B, dims.back()));
    nblk.push_back(std::max<std::uint64_t>(1, dims.back() / ext.back()));
    cells *= ext.back();
    TESSERA_INPUT_CHECK(cells < (u128{1} << 62), "--block-size " << B << " over " << sub.size()
                                                                 << " modes gives blocks of more "
                                                                    "than 2^62 cells");
  }
  const auto ncell = static_cast<std::uint64_t>(cells);
  const auto per_block = static_cast<std::uint64_t>(
      std::clamp(std::llround(D * static_cast<double>(ncell)), 1LL,
                 static_cast<long long>(std::min<std::uint64_t>(ncell, 1ull << 62))));
  std::uint64_t mult = (0x9E3779B97F4A7C15ull % ncell) | 1u;
  while (std::gcd(mult, ncell) != 1) mult += 2;
  const int N = static_cast<int>(dims.size());
  return generate_ids<T>(dims, nnz, seed, rank, P, [&](auto& idx, std::size_t k, std::uint64_t id) {
    const std::uint64_t blk = id / per_block, j = id % per_block;
    std::uint64_t cell = static_cast<std::uint64_t>(
        (static_cast<u128>(mult) * j + hash_keys(seed, blk, 0xB10Cull) % ncell) % ncell);
    for (int m = N - 1; m >= 0; --m) {
      const auto ms = static_cast<std::size_t>(m);
      const std::uint64_t off = cell % ext[ms];
      cell /= ext[ms];
      const std::uint64_t origin =
          hash_keys(seed, blk, static_cast<std::uint64_t>(m) + 1) % nblk[ms] * ext[ms];
      idx[ms][k] = static_cast<index_t>(origin + off);
    }
  });
}

double generated_lengths(const kernels::ContractSpec& spec, const BenchContractArgs& a,
                         std::uint64_t block, std::map<char, std::uint64_t>& len) {
  len.clear();
  const int m = spec.contracted() + spec.batch();
  const double key_space = std::max(1.0, a.nnz * a.nnz / a.products);
  const auto klen = static_cast<std::uint64_t>(
      std::clamp(std::round(std::pow(key_space, 1.0 / std::max(m, 1))), 1.0, 4294967296.0));
  int nfree = 0;
  for (char c : spec.x + spec.y)
    if (spec.x.find(c) == std::string::npos || spec.y.find(c) == std::string::npos) ++nfree;
  const double f =
      a.free_dim > 0 ? a.free_dim
                     : std::round(std::pow(
                           std::max(1.0, a.products / 16.0 / std::pow(double(klen), spec.batch())),
                           1.0 / std::max(nfree, 1)));
  auto flen = static_cast<std::uint64_t>(std::clamp(f, 1.0, 4294967296.0));
  auto klen_b = klen;
  if (block > 1) {  // whole blocks per mode
    flen = std::max<std::uint64_t>(block, (flen + block - 1) / block * block);
    klen_b = std::max<std::uint64_t>(block, (klen + block - 1) / block * block);
  }
  double expected = a.nnz * a.nnz;
  for (char c : spec.x) {
    const bool matched = spec.y.find(c) != std::string::npos;
    len[c] = matched ? klen_b : flen;
    if (matched) expected /= static_cast<double>(klen_b);
  }
  for (char c : spec.y)
    if (!len.count(c)) len[c] = flen;
  return expected;
}

#define TESSERA_BENCH_GENERATE(T)                                                                  \
  template SparseTensor<T> generate_share<T>(const std::string&,                                   \
                                             const std::map<char, std::uint64_t>&, std::uint64_t,  \
                                             std::uint64_t, int, int);                             \
  template SparseTensor<T> generate_blocky_share<T>(                                               \
      const std::string&, const std::map<char, std::uint64_t>&, std::uint64_t, std::uint64_t, int, \
      int, std::uint64_t, double);
TESSERA_BENCH_GENERATE(float)
TESSERA_BENCH_GENERATE(double)
#undef TESSERA_BENCH_GENERATE

}  // namespace tessera::driver::bench

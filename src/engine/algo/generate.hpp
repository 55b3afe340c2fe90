// Synthetic sparse tensors with a known structure, generated in parallel: each rank
// makes its share, keyed by a counter-based RNG, so the tensor does not depend on the
// number of ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "partition/partition.hpp"

namespace tessera::algo {

enum class IndexDist {
  uniform,   ///< every index equally likely
  powerlaw,  ///< Zipf-like: P(index = i) ~ (i + 1)^-alpha (synthetic::draw_index)
};
IndexDist parse_index_dist(const std::string& s);

enum class Structure {
  /// Exact rank-R tensor: component r is a dense block on random index subsets of each
  /// mode (supports drawn from the index distribution), X = sum of components, so a
  /// rank-R CP model fits exactly (before noise). nnz is approximately the target.
  blocks,
  /// Random coordinates (from the index distribution) with values of a dense rank-R model
  /// sampled there: realistic sparsity for benchmarks; not exactly low rank.
  sampled,
};
Structure parse_structure(const std::string& s);

struct GenerateOptions {
  std::vector<std::uint64_t> dims;
  std::int64_t nnz = 0;  ///< target number of nonzeros (before removing repeats)
  int rank = 5;
  double noise = 0.0;  ///< relative noise: ||noise|| ~= noise * ||signal||
  IndexDist dist = IndexDist::uniform;
  double alpha = 1.0;  ///< power-law exponent, > 0 (IndexDist::powerlaw)
  Structure structure = Structure::blocks;
  std::uint64_t seed = 1;
};

struct GenerateInfo {
  std::int64_t nnz = 0;      ///< distinct nonzeros generated (global)
  std::int64_t repeats = 0;  ///< repeated coordinates dropped (global)
  double signal_norm = 0;    ///< ||low-rank part||
  double noise_norm = 0;     ///< ||noise part||
};

/// Collective: generates the tensor, distributed with the nnz scheme (sorted,
/// coordinates unique). Throws InputError on bad options.
partition::Distributed<double> generate(const GenerateOptions& opt, const comm::Communicator& c,
                                        GenerateInfo* info = nullptr);

/// The generator's entries one at a time, before repeated coordinates are merged, for
/// streaming tensors of any size (tessera generate --out X.h5). Entry id in [0, total())
/// has coordinates and a signal value that are pure functions of (options, id), so any
/// split of the ids over ranks and chunks gives the same entries.
///  - blocks: entry id belongs to one component r (ids are numbered component by
///    component) and its value is that component's term prod_n U_n(i_n, r). Coordinates
///    repeat only across components; summing repeats gives exactly the tensor generate()
///    builds (before noise).
///  - sampled: value = the dense rank-R model at the coordinate; a coordinate drawn k times
///    sums to k times the model value.
class EntryGenerator {
 public:
  /// Throws InputError on bad options (as generate()).
  explicit EntryGenerator(const GenerateOptions& opt);
  ~EntryGenerator();
  EntryGenerator(const EntryGenerator&) = delete;
  EntryGenerator& operator=(const EntryGenerator&) = delete;

  /// Number of entries (ids).
  std::int64_t total() const;
  /// Entries [first, first + count): idx[n][k] (0-based) and the signal value vals[k]
  /// (no noise). OpenMP-parallel. blocks: ids < total(); sampled: any id >= 0 (ids from
  /// total() on are further draws, which replace repeated ones in a unique store).
  void fill(std::int64_t first, std::int64_t count, index_t* const* idx, double* vals) const;
  /// Noise sigma for the options' relative noise level: noise * RMS of the signal values of
  /// a fixed sample of up to 2^20 entries (the same on every rank, no communication).
  double noise_sigma() const;
  /// Standard normal noise sample of entry id (pure function of seed and id).
  double noise01(std::int64_t id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::algo

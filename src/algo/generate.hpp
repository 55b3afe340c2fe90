// Synthetic sparse tensors with a known structure, generated in parallel: each rank
// makes its share, keyed by a counter-based RNG, so the tensor does not depend on the
// number of ranks.
#pragma once

#include <cstdint>
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

}  // namespace tessera::algo

// Random contraction problems shared by the SpTC tests (kernels_sptc on the host backends,
// gpu_sptc on the cuda backend).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/sptc.hpp"

namespace tessera::test {

struct Problem {
  kernels::ContractSpec spec;
  std::map<char, std::uint64_t> len;  ///< length of every letter
};

/// The dims of a subscript string under the letter lengths `len`.
inline std::vector<std::uint64_t> dims_of(const std::string& sub,
                                          const std::map<char, std::uint64_t>& len) {
  std::vector<std::uint64_t> d;
  for (char c : sub) d.push_back(len.at(c));
  return d;
}

/// A random spec: X of order ox and Y of order oy sharing `contracted` summed letters and
/// `batch` kept letters, every input's letters in random positions, the output a random
/// order of the free and batch letters; every length in [1, max_len].
inline Problem random_problem(int ox, int oy, int contracted, int batch, std::uint64_t max_len,
                              std::mt19937_64& rng) {
  std::string letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::shuffle(letters.begin(), letters.end(), rng);
  std::size_t next = 0;
  std::string shared, xs, ys, out;
  for (int c = 0; c < contracted + batch; ++c) shared.push_back(letters[next++]);
  for (int c = contracted; c < contracted + batch; ++c) out.push_back(shared[c]);
  xs = ys = shared;
  for (int m = contracted + batch; m < ox; ++m) {
    xs.push_back(letters[next]);
    out.push_back(letters[next++]);
  }
  for (int m = contracted + batch; m < oy; ++m) {
    ys.push_back(letters[next]);
    out.push_back(letters[next++]);
  }
  std::shuffle(xs.begin(), xs.end(), rng);
  std::shuffle(ys.begin(), ys.end(), rng);
  std::shuffle(out.begin(), out.end(), rng);
  Problem p;
  p.spec = kernels::parse_contract_spec(xs + "," + ys + "->" + out);
  for (char c : xs + ys) p.len[c] = std::uniform_int_distribution<std::uint64_t>(1, max_len)(rng);
  return p;
}

}  // namespace tessera::test

// Shared by the MPI tests: every rank's nonzeros on every rank (for single-process
// reference runs against a distributed one).
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "comm/communicator.hpp"
#include "tensor/sparse_tensor.hpp"

namespace tessera::test {

template <typename T>
SparseTensor<T> gather_all(const SparseTensor<T>& x, const comm::Communicator& c) {
  const int P = c.size();
  std::vector<std::int64_t> counts(static_cast<std::size_t>(P), x.nnz());
  auto replicate = [P](const auto& v) {
    std::remove_cvref_t<decltype(v)> out;
    for (int r = 0; r < P; ++r) out.insert(out.end(), v.begin(), v.end());
    return out;
  };
  SparseTensor<T> all(x.dims);
  for (int n = 0; n < x.order(); ++n) all.idx[n] = c.alltoallv(replicate(x.idx[n]), counts);
  all.vals = c.alltoallv(replicate(x.vals), counts);
  return all;
}

}  // namespace tessera::test

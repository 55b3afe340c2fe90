// Helpers shared by the memory tier-3 tests under MPI (tier3_disk_test.cpp,
// tier3_algo_test.cpp): the communicator, a seed shared by the ranks, paths in the test
// folder (removed after the last test), equal shares of a tensor, and one tensor written
// to two stores (plain, and sorted into the blocks of a stored partition).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "algo/disk_tier.hpp"
#include "comm/mpi_communicator.hpp"
#include "io/h5store.hpp"
#include "test_util.hpp"

namespace tessera::test::tier3 {

inline const comm::MpiCommunicator& world() {
  static const comm::MpiCommunicator w(MPI_COMM_WORLD);
  return w;
}

inline std::uint64_t shared_seed() {
  std::uint64_t s = test::fresh_seed();
  MPI_Bcast(&s, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  return s;
}

/// A fresh path in the (collective) test folder; the same on every rank.
inline std::string fresh(const std::string& name) {
  static int counter = 0;
  return test::temp_dir() + "/tier3-" + std::to_string(counter++) + "-" + name;
}

/// A path of this rank only (for files one rank damages and reads alone).
inline std::string mine(const std::string& name) {
  return fresh(name) + ".rank" + std::to_string(world().rank()) + ".h5";
}

/// Removes the test folder (its stores) once every test has run.
class RemoveTempDir : public ::testing::Environment {
 public:
  void TearDown() override {
    const std::string dir = test::temp_dir();
    MPI_Barrier(MPI_COMM_WORLD);
    if (world().rank() == 0) std::filesystem::remove_all(dir);
  }
};
[[maybe_unused]] inline ::testing::Environment* const kRemoveTempDir =
    ::testing::AddGlobalTestEnvironment(new RemoveTempDir);

inline bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

/// Equal share r of n positions over P: [n r / P, n (r + 1) / P), as load_input cuts them.
inline std::pair<nnz_t, nnz_t> share_range(nnz_t n, int r, int P) {
  const nnz_t a = n * r / P, b = n * (r + 1) / P;
  return {a, b - a};
}

/// Nonzeros [first, first + count) of x, values converted to T.
template <typename T>
SparseTensor<T> range_of(const SparseTensor<double>& x, nnz_t first, nnz_t count) {
  SparseTensor<T> s(x.dims);
  for (int m = 0; m < x.order(); ++m)
    s.idx[m].assign(x.idx[m].begin() + first, x.idx[m].begin() + first + count);
  for (nnz_t k = first; k < first + count; ++k)
    s.vals.push_back(static_cast<T>(x.vals[static_cast<std::size_t>(k)]));
  return s;
}

inline io::H5WriteOptions write_opts(std::uint64_t chunk) {
  io::H5WriteOptions o;
  o.chunk_elems = chunk;
  o.progress = false;
  o.piece = 100;
  return o;
}

/// One tensor in two stores: `plain` in x's order, `blocked` sorted (stably) into the
/// blocks of a stored partition of P blocks (mode 0 cut into P index ranges), whose
/// nonzeros in stored order are `s`.
struct Stored {
  SparseTensor<double> x;
  std::string plain, blocked;
  SparseTensor<double> s;
  io::H5Partition part;
};

/// Collective: every rank passes the whole tensor x and writes its share of both stores.
inline Stored store(SparseTensor<double> x, const std::string& name, std::uint64_t chunk = 64) {
  const int P = world().size(), r = world().rank();
  const int N = x.order();
  Stored st;
  st.plain = fresh(name + ".h5");
  st.blocked = fresh(name + "-blocks.h5");
  io::H5Header meta;
  meta.dims = x.dims;
  meta.has_duplicates = 0;
  const auto [a, n] = share_range(x.nnz(), r, P);
  io::write_h5(st.plain, range_of<double>(x, a, n), world(), meta, write_opts(chunk));

  auto& part = st.part;
  part.grid.assign(static_cast<std::size_t>(N), 1);
  part.grid[0] = P;
  std::vector<std::uint64_t> cut;
  for (int b = 0; b <= P; ++b) cut.push_back(x.dims[0] * static_cast<std::uint64_t>(b) / P);
  part.cuts.push_back(cut);
  for (int m = 1; m < N; ++m) part.cuts.push_back({0, x.dims[static_cast<std::size_t>(m)]});
  st.s = SparseTensor<double>(x.dims);
  part.offsets = {0};
  index_t c[kMaxOrder];
  for (int b = 0; b < P; ++b) {
    for (nnz_t k = 0; k < x.nnz(); ++k) {
      const auto i = x.idx[0][static_cast<std::size_t>(k)];
      if (i < cut[static_cast<std::size_t>(b)] || i >= cut[static_cast<std::size_t>(b) + 1])
        continue;
      for (int m = 0; m < N; ++m) c[m] = x.idx[m][static_cast<std::size_t>(k)];
      st.s.push_back(c, x.vals[static_cast<std::size_t>(k)]);
    }
    part.offsets.push_back(static_cast<std::uint64_t>(st.s.nnz()));
  }
  io::H5Header hd = meta;
  hd.nnz = x.nnz();
  io::H5TensorWriter w(st.blocked, hd, world(), write_opts(chunk));
  io::H5Piece pc;
  pc.first = a;
  pc.count = n;
  for (int m = 0; m < N; ++m) pc.idx[m] = st.s.idx[m].data() + a;
  pc.vals = st.s.vals.data() + a;
  w.write({pc});
  w.commit(&part);
  st.x = std::move(x);
  return st;
}

inline std::string shape_name(const SparseTensor<double>& x) {
  std::ostringstream s;
  s << "dims";
  for (auto d : x.dims) s << ' ' << d;
  s << ", nnz " << x.nnz();
  return s.str();
}

inline std::unique_ptr<algo::DiskTensor<double>> open_range(const std::string& path, nnz_t first,
                                                            nnz_t count, nnz_t chunk) {
  algo::DiskTensorOptions o;
  o.path = path;
  o.first = first;
  o.count = count;
  o.chunk_nnz = chunk;
  return std::make_unique<algo::DiskTensor<double>>(o);
}

/// Same coordinates in the same order, values equal bit for bit.
template <typename T>
void expect_same(const SparseTensor<T>& got, const SparseTensor<T>& want, const std::string& what) {
  ASSERT_EQ(got.order(), want.order()) << what;
  ASSERT_EQ(got.nnz(), want.nnz()) << what;
  for (int m = 0; m < want.order(); ++m)
    EXPECT_TRUE(got.idx[m] == want.idx[m]) << what << " mode " << m;
  EXPECT_EQ(std::memcmp(got.vals.data(), want.vals.data(), want.vals.size() * sizeof(T)), 0)
      << what << ": values differ";
}

}  // namespace tessera::test::tier3

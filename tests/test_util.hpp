// Shared helpers for Tessera tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "tensor/sparse_tensor.hpp"
#include "tensor/synthetic.hpp"
#include "util/relabel.hpp"

namespace tessera::test {

/// Folder of the real tensors (../shared/data beside the repo), or "" when absent.
inline std::string shared_data_dir() {
  const char* e = std::getenv("TESSERA_SHARED_DATA");
  return e ? std::string(e) : std::string();
}

/// Full path of a shared tensor, or "" when it is not there.
std::string shared_tensor(const std::string& name);

/// A fresh random seed per call; TESSERA_TEST_SEED pins the first one to replay a failure.
/// Tests print the seed in their failure messages.
std::uint64_t fresh_seed();

/// Relative tolerance of a kernel result against the float64 reference, by value type.
template <typename T>
double tol() {
  return std::is_same_v<T, double> ? 1e-12 : 1e-5;
}

/// Raw pointers to factor matrices, with nullptr for `skip_mode` (a kernel must not read it).
template <typename T>
std::vector<const T*> pointers(const std::vector<std::vector<T>>& A, int skip_mode) {
  std::vector<const T*> p;
  for (std::size_t m = 0; m < A.size(); ++m)
    p.push_back(static_cast<int>(m) == skip_mode ? nullptr : A[m].data());
  return p;
}

/// A^T B (R x R, row-major) for row-major A, B (rows x R).
inline std::vector<double> inner(const std::vector<double>& A, const std::vector<double>& B,
                                 std::int64_t rows, int R) {
  std::vector<double> M(static_cast<std::size_t>(R) * R, 0.0);
  for (std::int64_t i = 0; i < rows; ++i)
    for (int p = 0; p < R; ++p)
      for (int q = 0; q < R; ++q) M[p * R + q] += A[i * R + p] * B[i * R + q];
  return M;
}

/// ||Ub - Ua (Ua^T Ub)||_F: an upper bound of the sine of the largest principal angle
/// between the column spans (both orthonormal; the distance of their projectors when the
/// ranks agree), computed without cancellation.
inline double subspace_gap(const Matrix<double>& Ua, const Matrix<double>& Ub) {
  const std::int64_t I = Ua.rows, Ra = Ua.cols, Rb = Ub.cols;
  std::vector<double> M(static_cast<std::size_t>(Ra * Rb), 0.0);
  for (std::int64_t i = 0; i < I; ++i)
    for (std::int64_t a = 0; a < Ra; ++a)
      for (std::int64_t b = 0; b < Rb; ++b) M[a * Rb + b] += Ua(i, a) * Ub(i, b);
  double s = 0;
  for (std::int64_t i = 0; i < I; ++i)
    for (std::int64_t b = 0; b < Rb; ++b) {
      double p = Ub(i, b);
      for (std::int64_t a = 0; a < Ra; ++a) p -= Ua(i, a) * M[a * Rb + b];
      s += p * p;
    }
  return std::sqrt(s);
}

/// Temporary folder unique to this test process group (same name on every rank when
/// called collectively after MPI init; created by rank 0).
std::string temp_dir();

/// The reference of the window tests: the entries of the synthetic tensor `s`'s ids [first,
/// first + count) whose labels lie in window `w`, filtered here serially from the
/// coordinates, the window's relabellings and the model (not synthetic::in_window), in id
/// order, coordinates shifted to the window.
template <typename T>
SparseTensor<T> window_reference(const synthetic::Spec& s, const synthetic::Window& w,
                                 std::uint64_t first, std::uint64_t count) {
  std::vector<std::uint64_t> dims(static_cast<std::size_t>(s.order));
  for (int n = 0; n < s.order; ++n) dims[static_cast<std::size_t>(n)] = w.hi[n] - w.lo[n];
  SparseTensor<T> x(dims);
  for (std::uint64_t id = first; id < first + count; ++id) {
    index_t orig[kMaxOrder], local[kMaxOrder];
    bool in = true;
    for (int n = 0; n < s.order; ++n) {
      orig[n] = synthetic::coordinate(s, id, n);
      const std::uint64_t label = w.relabelled ? w.relabel[n].forward(orig[n]) : orig[n];
      in = in && label >= w.lo[n] && label < w.hi[n];
      local[n] = static_cast<index_t>(label - w.lo[n]);
    }
    if (in) x.push_back(local, static_cast<T>(synthetic::model_value(s, orig)));
  }
  return x;
}

}  // namespace tessera::test

/// Skips the test (on every rank) when a shared tensor is missing.
#define TESSERA_REQUIRE_SHARED(path_var, name)                       \
  const std::string path_var = ::tessera::test::shared_tensor(name); \
  if (path_var.empty())                                              \
  GTEST_SKIP() << "shared tensor " << name << " not found "          \
               << "(set TESSERA_SHARED_DATA)"

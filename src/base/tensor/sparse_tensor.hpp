// Coordinate-format sparse tensor (order 1..16), structure of arrays.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/error.hpp"

namespace tessera {

using index_t = std::uint32_t;  ///< 0-based coordinate within one mode
using nnz_t = std::int64_t;     ///< count of nonzeros
inline constexpr int kMaxOrder = 16;

/// COO sparse tensor. Coordinates are 0-based. `dims` are the (global) mode lengths;
/// for a rank's block the coordinates may be global or block-local, which the owner
/// documents. Values have type T (float or double).
/// sqrt(sum of v[k]^2) of n values, summed after scaling by a power of two near the largest
/// magnitude, so it neither overflows nor underflows for finite values (+inf or NaN when one
/// is).
template <typename T>
double scaled_norm(const T* v, std::size_t n) {
  double mx = 0;
  for (std::size_t k = 0; k < n; ++k) mx = std::max(mx, std::abs(static_cast<double>(v[k])));
  if (mx == 0 || !std::isfinite(mx)) return mx;
  const int e = std::clamp(std::ilogb(mx), -1000, 1000);  // 2^-e stays a finite double
  const double down = std::ldexp(1.0, -e);
  double s = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const double x = static_cast<double>(v[k]) * down;
    s += x * x;
  }
  return std::ldexp(std::sqrt(s), e);
}

template <typename T>
struct SparseTensor {
  std::vector<std::uint64_t> dims;        ///< mode lengths
  std::vector<std::vector<index_t>> idx;  ///< idx[mode][k]
  std::vector<T> vals;                    ///< vals[k]

  SparseTensor() = default;
  /// Empty tensor of the given shape.
  explicit SparseTensor(std::vector<std::uint64_t> d) : dims(std::move(d)), idx(dims.size()) {}

  int order() const { return static_cast<int>(dims.size()); }
  nnz_t nnz() const { return static_cast<nnz_t>(vals.size()); }

  void reserve(std::size_t n) {
    for (auto& v : idx) v.reserve(n);
    vals.reserve(n);
  }
  void clear() {
    for (auto& v : idx) v.clear();
    vals.clear();
  }
  /// Append one nonzero; `c` points to order() coordinates.
  void push_back(const index_t* c, T v) {
    for (int m = 0; m < order(); ++m) idx[m].push_back(c[m]);
    vals.push_back(v);
  }
  /// Sum of squares of the values (local).
  double norm_squared() const {
    double s = 0;
    for (T v : vals) s += static_cast<double>(v) * static_cast<double>(v);
    return s;
  }
  /// 2-norm of the values (local), without overflow or underflow while the norm itself is
  /// a finite double (as LAPACK dnrm2): the sum of squares of the values scaled by a power
  /// of two near 1 / max |value|, so it equals sqrt(norm_squared()) bitwise whenever that
  /// neither overflows nor underflows.
  double norm() const { return scaled_norm(vals.data(), vals.size()); }
  /// Same tensor with values converted to U.
  template <typename U>
  SparseTensor<U> cast() const {
    SparseTensor<U> o(dims);
    o.idx = idx;
    o.vals.assign(vals.begin(), vals.end());
    return o;
  }
};

/// Row-major dense matrix (rows x cols) on the host.
template <typename T>
struct Matrix {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::vector<T> data;

  Matrix() = default;
  Matrix(std::int64_t r, std::int64_t c, T fill = T(0))
      : rows(r), cols(c), data(static_cast<std::size_t>(r * c), fill) {}
  T& operator()(std::int64_t i, std::int64_t j) {
    return data[static_cast<std::size_t>(i * cols + j)];
  }
  const T& operator()(std::int64_t i, std::int64_t j) const {
    return data[static_cast<std::size_t>(i * cols + j)];
  }
  T* row(std::int64_t i) { return data.data() + i * cols; }
  const T* row(std::int64_t i) const { return data.data() + i * cols; }
};

/// Parses "AxBxC" (or "A,B,C") into a list of positive integers; throws InputError.
std::vector<std::uint64_t> parse_dims(const std::string& s, const char* what = "dims");

/// "12092x9184x28818".
std::string format_dims(const std::vector<std::uint64_t>& d);

}  // namespace tessera

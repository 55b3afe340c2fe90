// Row-wise factor updates (see row_update.hpp): coordinate descent and per-row Cholesky on
// the host, OpenMP-parallel over rows.
#include "linalg/row_update.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "linalg/dense.hpp"
#include "util/error.hpp"

namespace tessera::linalg {

namespace {

int team(std::int64_t rows, double per_row, int threads) {
  if (static_cast<double>(rows) * per_row < 1048576.0) return 1;
  return std::max(1, threads > 0 ? threads : omp_get_max_threads());
}

/// Coordinate-descent sweeps on one row: H (R x R, row-major, double), m, a in/out.
void descend(const double* H, const double* m, double* a, int R, const RowUpdate& u) {
  for (int sweep = 0; sweep < u.sweeps; ++sweep) {
    for (int r = 0; r < R; ++r) {
      const double* h = H + static_cast<std::size_t>(r) * R;
      double z = m[r];
      for (int s = 0; s < R; ++s)
        if (s != r) z -= h[s] * a[s];
      const double d = h[r] + u.l2;
      double v = 0;
      if (d > 0) {
        if (u.nonneg)
          v = std::max(0.0, z - u.l1) / d;
        else
          v = (z > u.l1 ? z - u.l1 : z < -u.l1 ? z + u.l1 : 0.0) / d;
      }
      a[r] = v;
    }
  }
}

/// Solves (H + l2 I) x = m in place of m by Cholesky, L scratch (R x R); H symmetric.
/// Returns true when a ridge was needed.
bool solve_row(const double* H, double* m, double* L, int R, double l2) {
  const std::size_t RR = static_cast<std::size_t>(R) * R;
  double trace = 0;
  for (int r = 0; r < R; ++r) trace += H[static_cast<std::size_t>(r) * R + r];
  if (!(trace + R * l2 > 0)) {  // H = 0 and no ridge: nothing observed in this row
    std::fill(m, m + R, 0.0);
    return true;
  }
  bool ridge = false;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const double add =
        l2 + (attempt == 0 ? 0.0 : 1e-10 * trace / R + std::numeric_limits<double>::min());
    std::copy(H, H + RR, L);
    for (int r = 0; r < R; ++r) L[static_cast<std::size_t>(r) * R + r] += add;
    bool ok = true;
    for (int j = 0; j < R && ok; ++j) {  // lower Cholesky, row-major
      double* lj = L + static_cast<std::size_t>(j) * R;
      double d = lj[j];
      for (int k = 0; k < j; ++k) d -= lj[k] * lj[k];
      if (!(d > 1e-14 * (trace / R + l2))) {
        ok = false;
        break;
      }
      d = std::sqrt(d);
      lj[j] = d;
      for (int i = j + 1; i < R; ++i) {
        double* li = L + static_cast<std::size_t>(i) * R;
        double v = li[j];
        for (int k = 0; k < j; ++k) v -= li[k] * lj[k];
        li[j] = v / d;
      }
    }
    if (!ok) {
      ridge = true;
      continue;
    }
    for (int i = 0; i < R; ++i) {  // L y = m
      const double* li = L + static_cast<std::size_t>(i) * R;
      double v = m[i];
      for (int k = 0; k < i; ++k) v -= li[k] * m[k];
      m[i] = v / li[i];
    }
    for (int i = R - 1; i >= 0; --i) {  // L^T x = y
      double v = m[i];
      for (int k = i + 1; k < R; ++k) v -= L[static_cast<std::size_t>(k) * R + i] * m[k];
      m[i] = v / L[static_cast<std::size_t>(i) * R + i];
    }
    return ridge;
  }
  std::fill(m, m + R, 0.0);  // not even the ridge helped (non-finite H): no update
  return true;
}

}  // namespace

template <typename T>
void pack_outer(const T* A, std::int64_t rows, int R, T* P, int threads) {
  TESSERA_EXPECTS(rows >= 0 && R >= 1, "pack_outer: rows " << rows << ", R " << R);
  const std::int64_t W = packed_size(R);
  const int nt = team(rows, static_cast<double>(W), threads);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* a = A + i * R;
    T* p = P + i * W;
    for (int r = 0; r < R; ++r)
      for (int s = r; s < R; ++s) *p++ = a[r] * a[s];
  }
}

template <typename T>
std::int64_t row_update(T* A, const T* M, std::int64_t rows, int R, const T* V, const T* Gp,
                        const RowUpdate& u, double* quad, int threads) {
  TESSERA_EXPECTS(rows >= 0 && R >= 1, "row_update: rows " << rows << ", R " << R);
  TESSERA_EXPECTS((V == nullptr) != (Gp == nullptr), "row_update: V or Gp, not both");
  TESSERA_EXPECTS(
      u.sweeps >= 1 && u.l1 >= 0 && u.l2 >= 0 && std::isfinite(u.l1) && std::isfinite(u.l2),
      "row_update: sweeps >= 1 and finite l1, l2 >= 0");
  const std::size_t RR = static_cast<std::size_t>(R) * R;
  const std::int64_t W = packed_size(R);
  if (quad != nullptr) *quad = 0;
  if (rows == 0) return 0;
  if (V != nullptr && !u.descent()) {
    // The shared system: one factorisation for every row (solve_normal's pseudo-inverse
    // fallback when V + l2 I is singular).
    std::vector<T> Vr(V, V + RR);
    for (int r = 0; r < R; ++r) Vr[static_cast<std::size_t>(r) * R + r] += static_cast<T>(u.l2);
    std::copy(M, M + rows * R, A);
    return solve_normal(A, rows, Vr.data(), R, threads) ? rows : 0;
  }
  std::vector<double> Hs;
  if (V != nullptr) Hs.assign(V, V + RR);
  std::int64_t ridges = 0;
  double q = 0;
  const int nt = team(rows, static_cast<double>(RR) * (u.descent() ? u.sweeps : R), threads);
#pragma omp parallel num_threads(nt) reduction(+ : ridges, q)
  {
    std::vector<double> H(RR), L(RR), m(static_cast<std::size_t>(R)),
        a(static_cast<std::size_t>(R));
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < rows; ++i) {
      const double* h = Hs.data();
      if (Gp != nullptr) {
        const T* g = Gp + i * W;
        for (int r = 0; r < R; ++r)
          for (int s = r; s < R; ++s) {
            const double v = static_cast<double>(*g++);
            H[static_cast<std::size_t>(r) * R + s] = v;
            H[static_cast<std::size_t>(s) * R + r] = v;
          }
        h = H.data();
      }
      for (int r = 0; r < R; ++r)
        m[static_cast<std::size_t>(r)] = static_cast<double>(M[i * R + r]);
      if (u.descent()) {
        for (int r = 0; r < R; ++r)
          a[static_cast<std::size_t>(r)] = static_cast<double>(A[i * R + r]);
        descend(h, m.data(), a.data(), R, u);
      } else {
        a = m;
        if (solve_row(h, a.data(), L.data(), R, u.l2)) ++ridges;
      }
      for (int r = 0; r < R; ++r) A[i * R + r] = static_cast<T>(a[static_cast<std::size_t>(r)]);
      if (quad != nullptr && Gp != nullptr) {
        // With the stored (rounded) values, as the model is.
        double s = 0;
        for (int r = 0; r < R; ++r) {
          const double ar = static_cast<double>(A[i * R + r]);
          double t = 0;
          for (int c = 0; c < R; ++c)
            t += h[static_cast<std::size_t>(r) * R + c] * static_cast<double>(A[i * R + c]);
          s += ar * t;
        }
        q += s;
      }
    }
  }
  if (quad != nullptr) *quad = q;
  return ridges;
}

#define TESSERA_ROW_UPDATE_INSTANTIATE(T)                                                  \
  template void pack_outer<T>(const T*, std::int64_t, int, T*, int);                       \
  template std::int64_t row_update<T>(T*, const T*, std::int64_t, int, const T*, const T*, \
                                      const RowUpdate&, double*, int);

TESSERA_ROW_UPDATE_INSTANTIATE(float)
TESSERA_ROW_UPDATE_INSTANTIATE(double)
#undef TESSERA_ROW_UPDATE_INSTANTIATE

}  // namespace tessera::linalg

// The cpu backend's CP-APR operations (kernels/ops/apr.hpp): Phi over the CSF tree of the
// mode, its root slices over the OpenMP team (each writes its own output row), partial
// Hadamard products kept per level as the MTTKRP keeps them; the elementwise steps are
// OpenMP loops.
#include "kernels/ops/apr.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/cpu/backend.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace tessera::kernels::cpu {

namespace {

/// One root slice's walk: acc (R) += the leaves' w h, sums += their terms.
template <typename T>
struct PhiWalk {
  const CsfTree<T>& t;
  std::vector<const T*> A;  ///< per level: the factor of mode_at_level[l]
  const T* b = nullptr;     ///< the slice's row of the mode's factor (B)
  std::size_t R = 0;
  double eps = 0;
  std::vector<std::vector<double>> part;  ///< per level: the Hadamard product down to it
  double* acc = nullptr;
  double loglik = 0, inner = 0;

  void leaf(const double* h, double v) {
    double model = 0;
    for (std::size_t r = 0; r < R; ++r) model += static_cast<double>(b[r]) * h[r];
    const double den = std::max(model, eps);
    loglik += v * std::log(den);
    inner += v * model;
    if (acc != nullptr) {
      const double w = v / den;
      for (std::size_t r = 0; r < R; ++r) acc[r] += w * h[r];
    }
  }
  /// Node f of level l (>= 1), whose parent's product is part[l - 1].
  void visit(int l, csf_ptr_t f) {
    const auto L = static_cast<std::size_t>(l);
    const T* row = A[L] + static_cast<std::size_t>(t.fids[L][static_cast<std::size_t>(f)]) * R;
    double* p = part[L].data();
    const double* q = part[L - 1].data();
    for (std::size_t r = 0; r < R; ++r) p[r] = q[r] * static_cast<double>(row[r]);
    if (l == t.order - 1) {
      leaf(p, static_cast<double>(t.vals[static_cast<std::size_t>(f)]));
      return;
    }
    for (csf_ptr_t c = t.fptr[L][static_cast<std::size_t>(f)];
         c < t.fptr[L][static_cast<std::size_t>(f) + 1]; ++c)
      visit(l + 1, c);
  }
};

}  // namespace

template <typename T>
void poisson_phi(Backend<T>& be, const TensorHandle<T>& x, int mode,
                 const std::vector<const T*>& factors, int R, double eps, T* out,
                 double* host_sums) {
  const CpuTensor<T>& h = cpu_handle(x);
  const int N = h.order();
  TESSERA_EXPECTS(mode >= 0 && mode < N, "mode " << mode << " outside 0.." << N - 1);
  TESSERA_EXPECTS(R >= 1, "rank R must be positive, got " << R);
  TESSERA_EXPECTS(static_cast<int>(factors.size()) == N,
                  "need one factor pointer per mode: " << factors.size() << " for order " << N);
  TESSERA_EXPECTS(eps > 0, "eps must be positive, got " << eps);
  Timer timer;
  const CsfTree<T>& t = h.csf().tree(mode);
  const auto Rs = static_cast<std::size_t>(R);
  const auto rows = static_cast<std::int64_t>(h.dims()[static_cast<std::size_t>(mode)]);
  if (out != nullptr) std::fill(out, out + static_cast<std::size_t>(rows) * Rs, T(0));
  const T* B = factors[static_cast<std::size_t>(mode)];
  double loglik = 0, inner = 0;
  if (N == 1) {  // one level: the leaves are the root, h is a row of ones
    const std::vector<double> ones(Rs, 1.0);
    std::vector<double> acc(Rs);
    PhiWalk<T> w{t, {}, nullptr, Rs, eps, {}, nullptr};
    for (std::size_t k = 0; k < t.vals.size(); ++k) {
      const auto i = static_cast<std::size_t>(t.fids[0][k]);
      w.b = B + i * Rs;
      std::fill(acc.begin(), acc.end(), 0.0);
      w.acc = out != nullptr ? acc.data() : nullptr;
      w.leaf(ones.data(), static_cast<double>(t.vals[k]));
      if (out != nullptr)
        for (std::size_t r = 0; r < Rs; ++r)
          out[i * Rs + r] = static_cast<T>(static_cast<double>(out[i * Rs + r]) + acc[r]);
    }
    loglik = w.loglik;
    inner = w.inner;
  } else {
    const auto roots = static_cast<std::int64_t>(t.nodes(0));
#pragma omp parallel num_threads(team_of(be)) reduction(+ : loglik, inner)
    {
      PhiWalk<T> w{t,
                   std::vector<const T*>(static_cast<std::size_t>(N), nullptr),
                   nullptr,
                   Rs,
                   eps,
                   std::vector<std::vector<double>>(static_cast<std::size_t>(N),
                                                    std::vector<double>(Rs, 1.0)),
                   nullptr};
      for (int l = 1; l < N; ++l)
        w.A[static_cast<std::size_t>(l)] =
            factors[static_cast<std::size_t>(t.mode_at_level[static_cast<std::size_t>(l)])];
      std::vector<double> acc(Rs);
#pragma omp for schedule(dynamic, 16)
      for (std::int64_t f = 0; f < roots; ++f) {
        const auto i = static_cast<std::size_t>(t.fids[0][static_cast<std::size_t>(f)]);
        w.b = B + i * Rs;
        std::fill(acc.begin(), acc.end(), 0.0);
        w.acc = out != nullptr ? acc.data() : nullptr;
        for (csf_ptr_t c = t.fptr[0][static_cast<std::size_t>(f)];
             c < t.fptr[0][static_cast<std::size_t>(f) + 1]; ++c)
          w.visit(1, c);
        if (out != nullptr)
          for (std::size_t r = 0; r < Rs; ++r) out[i * Rs + r] = static_cast<T>(acc[r]);
      }
      loglik += w.loglik;
      inner += w.inner;
    }
  }
  if (host_sums != nullptr) {
    host_sums[0] = loglik;
    host_sums[1] = inner;
  }
  h.record_compute(timer.seconds());
}
TESSERA_INSTANTIATE_OP(TESSERA_POISSON_PHI_OP);

template <typename T>
double apr_kkt_update(Backend<T>& be, T* B, const T* Phi, std::int64_t rows, int R, bool update) {
  const std::int64_t n = rows * R;
  double kkt = 0;
#pragma omp parallel for num_threads(team_of(be)) reduction(max    \
                                                            : kkt) \
    schedule(static) if (n > (1 << 16))
  for (std::int64_t e = 0; e < n; ++e) {
    kkt = std::max(
        kkt, std::abs(std::min(static_cast<double>(B[e]), 1.0 - static_cast<double>(Phi[e]))));
    if (update) B[e] *= Phi[e];  // after its own term: the check sees B before the update
  }
  return kkt;
}
TESSERA_INSTANTIATE_OP(TESSERA_APR_KKT_UPDATE_OP);

template <typename T>
std::int64_t apr_shift(Backend<T>& be, T* A, const T* Phi, std::int64_t rows, int R, double kappa,
                       double kappa_tol) {
  const std::int64_t n = rows * R;
  std::int64_t changed = 0;
#pragma omp parallel for num_threads(team_of(be)) reduction(+ : changed) schedule(static) \
    if (n > (1 << 16))
  for (std::int64_t e = 0; e < n; ++e)
    if (static_cast<double>(Phi[e]) > 1.0 && static_cast<double>(A[e]) < kappa_tol) {
      A[e] = static_cast<T>(static_cast<double>(A[e]) + kappa);
      ++changed;
    }
  return changed;
}
TESSERA_INSTANTIATE_OP(TESSERA_APR_SHIFT_OP);

template <typename T>
void column_sums(Backend<T>& be, const T* A, std::int64_t rows, int R, double* host_out) {
  (void)be;  // R x rows adds: serial, in row order (the same sums on every team size)
  std::fill(host_out, host_out + R, 0.0);
  for (std::int64_t i = 0; i < rows; ++i)
    for (int r = 0; r < R; ++r) host_out[r] += static_cast<double>(A[i * R + r]);
}
TESSERA_INSTANTIATE_OP(TESSERA_COLUMN_SUMS_OP);

}  // namespace tessera::kernels::cpu

// The losses of generalized CP (GCP; Hong, Kolda and Duersch, SIAM Review 2020; Kolda and
// Hong, SIMODS 2020), elementwise in the model value m at an entry whose datum is x: the
// value f(x, m) and its derivative df/dm. Host and device code share them (TESSERA_HD).
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__
#else
#define TESSERA_HD
#endif

namespace tessera::kernels {

/// The GCP losses (algo::Loss names them for the user).
enum class GcpLoss {
  gaussian,   ///< (x - m)^2
  poisson,    ///< log link: e^m - x m (m is the log-rate)
  bernoulli,  ///< logit link: log(1 + e^m) - x m (m is the log-odds; x in {0, 1})
  gamma,      ///< x / (m + eps) + log(m + eps), m >= 0
  rayleigh,   ///< 2 log(m + eps) + (pi / 4) (x / (m + eps))^2, m >= 0
  huber,      ///< (x - m)^2 inside |x - m| <= delta, 2 delta |x - m| - delta^2 outside
};

/// A loss and its parameters.
struct GcpLossSpec {
  GcpLoss kind = GcpLoss::gaussian;
  double huber_delta = 1.0;  ///< huber's threshold
  double eps = 1e-10;        ///< gamma's and rayleigh's shift of m
};

/// True for the losses whose model values must stay >= 0 (the factors are kept >= 0).
TESSERA_HD inline bool gcp_nonnegative(GcpLoss k) {
  return k == GcpLoss::gamma || k == GcpLoss::rayleigh;
}

/// f(x, m).
TESSERA_HD inline double gcp_value(const GcpLossSpec& s, double x, double m) {
  switch (s.kind) {
    case GcpLoss::gaussian:
      return (x - m) * (x - m);
    case GcpLoss::poisson:
      return std::exp(m) - x * m;
    case GcpLoss::bernoulli:  // log(1 + e^m), without overflow
      return (m > 0 ? m + std::log1p(std::exp(-m)) : std::log1p(std::exp(m))) - x * m;
    case GcpLoss::gamma: {
      const double mm = (m > 0 ? m : 0) + s.eps;
      return x / mm + std::log(mm);
    }
    case GcpLoss::rayleigh: {
      const double mm = (m > 0 ? m : 0) + s.eps;
      const double q = x / mm;
      return 2 * std::log(mm) + 0.7853981633974483 * q * q;
    }
    case GcpLoss::huber: {
      const double r = x - m, a = r < 0 ? -r : r;
      return a <= s.huber_delta ? r * r : 2 * s.huber_delta * a - s.huber_delta * s.huber_delta;
    }
  }
  return 0;
}

/// df/dm at (x, m).
TESSERA_HD inline double gcp_deriv(const GcpLossSpec& s, double x, double m) {
  switch (s.kind) {
    case GcpLoss::gaussian:
      return 2 * (m - x);
    case GcpLoss::poisson:
      return std::exp(m) - x;
    case GcpLoss::bernoulli:  // sigmoid(m) - x
      return (m >= 0 ? 1 / (1 + std::exp(-m)) : std::exp(m) / (1 + std::exp(m))) - x;
    case GcpLoss::gamma: {
      const double mm = (m > 0 ? m : 0) + s.eps;
      return -x / (mm * mm) + 1 / mm;
    }
    case GcpLoss::rayleigh: {
      const double mm = (m > 0 ? m : 0) + s.eps;
      return 2 / mm - 1.5707963267948966 * x * x / (mm * mm * mm);
    }
    case GcpLoss::huber: {
      const double r = x - m, d = s.huber_delta;
      return r > d ? -2 * d : r < -d ? 2 * d : -2 * r;
    }
  }
  return 0;
}

}  // namespace tessera::kernels

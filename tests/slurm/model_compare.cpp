// Compares two CP model files (tessera-kruskal HDF5): same dims and rank, and lambda and
// every factor entry equal within a relative tolerance. Used by tests/slurm/slurm_ci.sh to
// check that a run requeued by Slurm and resumed from its checkpoint ends with the model of
// an uninterrupted run.
//   model_compare A.h5 B.h5 [REL_TOL]   exit 0: equal, 1: different, 2: unreadable
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <string>

#include "io/model_io.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: model_compare A.h5 B.h5 [REL_TOL]\n");
    return 2;
  }
  const double tol = argc > 3 ? std::atof(argv[3]) : 1e-9;
  try {
    const auto a = tessera::io::read_kruskal_h5(argv[1]);
    const auto b = tessera::io::read_kruskal_h5(argv[2]);
    if (a.dims != b.dims || a.rank != b.rank) {
      std::fprintf(stderr, "model_compare: dims or rank differ\n");
      return 1;
    }
    double worst = 0;
    // A non-finite entry in either model is a difference (std::max would drop a NaN).
    auto cmp = [&](double x, double y) {
      const double d = std::fabs(x - y) / std::max(1.0, std::fabs(x));
      if (!std::isfinite(x) || !std::isfinite(y) || !(d <= worst))
        worst = std::isfinite(d) ? d : std::numeric_limits<double>::infinity();
    };
    for (std::size_t r = 0; r < a.lambda.size(); ++r) cmp(a.lambda[r], b.lambda[r]);
    for (std::size_t n = 0; n < a.factors.size(); ++n)
      for (std::size_t i = 0; i < a.factors[n].data.size(); ++i)
        cmp(a.factors[n].data[i], b.factors[n].data[i]);
    std::printf("model_compare: rank %d, %zu modes, largest relative difference %.3g (tol %.3g)\n",
                a.rank, a.dims.size(), worst, tol);
    return worst <= tol ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "model_compare: %s\n", e.what());
    return 2;
  }
}

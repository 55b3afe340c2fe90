#include "algo/cp_init.hpp"

#include <algorithm>
#include <cmath>

#include "algo/tucker.hpp"
#include "kernels/ttmc.hpp"
#include "util/error.hpp"

namespace tessera::algo {

std::vector<int> nvecs_ranks(const std::vector<std::uint64_t>& dims, int R) {
  const int N = static_cast<int>(dims.size());
  std::vector<int> r(static_cast<std::size_t>(N));
  for (int n = 0; n < N; ++n)
    r[static_cast<std::size_t>(n)] = static_cast<int>(
        std::min<std::uint64_t>(static_cast<std::uint64_t>(R), dims[static_cast<std::size_t>(n)]));
  // r_n <= prod of the others (a larger r_n leaves columns no data determines); lowering one
  // can lower the bound of another, so repeat until nothing changes.
  for (bool changed = true; changed;) {
    changed = false;
    for (int n = 0; n < N; ++n) {
      double prod = 1;
      for (int m = 0; m < N; ++m)
        if (m != n) prod *= r[static_cast<std::size_t>(m)];
      if (r[static_cast<std::size_t>(n)] > prod) {
        r[static_cast<std::size_t>(n)] = std::max(1, static_cast<int>(prod));
        changed = true;
      }
    }
  }
  return r;
}

template <typename T>
KruskalModel nvecs_start(const partition::Distributed<T>& d, kernels::Backend<T>& be,
                         const comm::Communicator& ctrl, const comm::Communicator& data, int R,
                         std::uint64_t seed, const std::vector<bool>& nonneg) {
  const auto& dims = d.dist.dims;
  const int N = static_cast<int>(dims.size());
  TESSERA_INPUT_CHECK(N >= 2, "--init nvecs needs a tensor of order 2 or more");
  TuckerOptions o;
  o.ranks = nvecs_ranks(dims, R);
  o.init = TuckerInit::hosvd;
  o.max_iters = 1;
  o.seed = seed;
  o.print_iterations = false;
  o.tensor_name = "--init nvecs";
  bool small = true;
  for (int n = 0; n < N; ++n) small = small && kernels::ttmc_output_cols(o.ranks, n) <= 4096;
  o.svd = small ? SvdMethod::gram : SvdMethod::subspace;
  const TuckerResult t = tucker_hooi<T>(d, be, ctrl, o, &data);
  KruskalModel m;
  m.dims = dims;
  m.rank = R;
  m.lambda.assign(static_cast<std::size_t>(R), 1.0);
  for (int n = 0; n < N; ++n) {
    const auto I = static_cast<std::int64_t>(dims[static_cast<std::size_t>(n)]);
    const int rn = o.ranks[static_cast<std::size_t>(n)];
    const bool abs =
        static_cast<std::size_t>(n) < nonneg.size() && nonneg[static_cast<std::size_t>(n)];
    Matrix<double> F(I, R, 0.0);
    const auto& U = t.model.factors[static_cast<std::size_t>(n)];
    for (std::int64_t i = 0; i < I; ++i)
      for (int r = 0; r < R; ++r)
        F(i, r) = r < rn ? (abs ? std::abs(U(i, r)) : U(i, r))
                         : initial_factor_value(seed, n, static_cast<std::uint64_t>(i), r);
    m.factors.push_back(std::move(F));
  }
  return m;
}

template KruskalModel nvecs_start<float>(const partition::Distributed<float>&,
                                         kernels::Backend<float>&, const comm::Communicator&,
                                         const comm::Communicator&, int, std::uint64_t,
                                         const std::vector<bool>&);
template KruskalModel nvecs_start<double>(const partition::Distributed<double>&,
                                          kernels::Backend<double>&, const comm::Communicator&,
                                          const comm::Communicator&, int, std::uint64_t,
                                          const std::vector<bool>&);

void check_cp_state(const CpState& s, const std::vector<std::uint64_t>& dims, int R) {
  TESSERA_INPUT_CHECK(s.model.dims == dims, "resume: the saved factors have dims "
                                                << format_dims(s.model.dims)
                                                << ", the tensor has dims " << format_dims(dims));
  TESSERA_INPUT_CHECK(
      s.model.rank == R && static_cast<int>(s.model.lambda.size()) == R,
      "resume: the saved model has rank " << s.model.rank << ", this run rank " << R);
  TESSERA_INPUT_CHECK(s.model.factors.size() == dims.size(), "resume: the saved model has "
                                                                 << s.model.factors.size()
                                                                 << " factors for an order-"
                                                                 << dims.size() << " tensor");
  for (std::size_t n = 0; n < dims.size(); ++n)
    TESSERA_INPUT_CHECK(s.model.factors[n].rows == static_cast<std::int64_t>(dims[n]) &&
                            s.model.factors[n].cols == R &&
                            s.model.factors[n].data.size() == dims[n] * static_cast<std::size_t>(R),
                        "resume: the saved factor of mode " << n << " has the wrong shape");
  TESSERA_INPUT_CHECK(
      s.iteration >= 0 && static_cast<int>(s.fit_history.size()) == s.iteration,
      "resume: " << s.fit_history.size() << " saved fits for " << s.iteration << " iterations");
}

}  // namespace tessera::algo

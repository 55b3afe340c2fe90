#include "algo/tucker_dense.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "kernels/ops/tucker_dense.hpp"
#include "linalg/blas.hpp"
#include "linalg/dense.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace tessera::algo::detail {

namespace {
/// Largest deviation of U^T U from the identity (max |G - I| over the entries) for which one
/// CholeskyQR pass suffices. One pass in double leaves U^T U - I of order u kappa(U)^2
/// (u = 2^-53; Yamamoto et al., ETNA 44, 2015), and kappa(U)^2 <= (1 + R dev) / (1 - R dev):
/// below 1e-4 that is rounding for any R up to thousands. Float Tucker's Y V / sigma (the
/// one-block solver's float eigenvectors) comes at 1e-7 to 1e-5, so it now takes one pass,
/// not two (session 37; was 1e-8, from an estimate of dev^2 that the analysis does not have).
constexpr double kOrthSkip = 1e-4;
}  // namespace

void Net::sum(double* p, std::size_t n) {
  if (c.size() == 1 || n == 0 || local) return;
  if (stream != nullptr) {  // in the stream, timed by marks (Net::stream)
    const std::size_t a = marks->comm_start();
    c.enqueue_allreduce(p, n, comm::ReduceOp::sum, stream);
    std::vector<double*> to{&seconds};
    to.insert(to.end(), also.begin(), also.end());
    marks->comm_stop(a, std::move(to));
    ++calls;
    return;
  }
  Timer t;
  c.allreduce(p, n);
  seconds += t.seconds();
  ++calls;
}

std::string dense_method(SvdMethod svd, comm::MemorySpace where,
                         const std::function<bool(int, int)>& one_block,
                         const std::vector<int>& ranks) {
  const std::string at = where == comm::MemorySpace::device ? "device" : "host";
  // Device eigen-solves: the one-block solver where the backend runs it, else cuSOLVER.
  auto device_eig = [&]() -> std::string {
    int block = 0;
    for (std::size_t n = 0; n < ranks.size(); ++n) {
      // C = the other ranks' product, capped just past the solver's limit (fits an int)
      int C = 1;
      for (std::size_t m = 0; m < ranks.size(); ++m)
        if (m != n)
          C = static_cast<int>(
              std::min<std::int64_t>(std::int64_t(C) * ranks[m], kernels::ops::kBlockEigMaxN + 1));
      block += kernels::ops::block_eig_applies(C, ranks[n]) && one_block(C, ranks[n]);
    }
    if (block == 0) return "syevdx";
    return block == static_cast<int>(ranks.size()) ? "block-eig" : "block-eig|syevdx";
  };
  switch (svd) {
    case SvdMethod::gram:
      return "gram/" + at + "-" + (at == "device" ? device_eig() : "syevr") + "+cholqr2";
    case SvdMethod::subspace:
      return "subspace/" + at + "-cholqr2";
    case SvdMethod::scalapack:
      return "scalapack/host-pdgesvd+" + at + "-cholqr2";
  }
  return "?";
}

namespace {

template <typename X>
double* ensure_in(kernels::Backend<X>& be, kernels::Array<double>& a, std::size_t n) {
  if (a.size() < n) {
    // Freeing waits for the device (cudaFree); wait through the backend first (its waiter
    // polls the communicator where collectives are in the stream).
    if (a.size() > 0) be.synchronize();
    a = kernels::Array<double>();  // free first: the old buffer is too small
    a = be.allocate_double(std::max<std::size_t>(n, 1));
  }
  return a.data();
}

/// The eigen path of orthonormalize for a numerically singular Gram G (host) of U (host
/// memory, o.be a host backend): an orthonormal basis of U's well-determined span,
/// completed by random directions.
template <typename X>
int orthonormalize_singular(OrthContext<X>& o, double* U, std::int64_t rows, int R,
                            const std::vector<double>& G, const RandomFill& rnd, int col_offset,
                            int depth) {
  TESSERA_EXPECTS(depth < 3,
                  "could not complete an orthonormal basis (rows " << rows << ", R " << R << ")");
  std::vector<double> w(static_cast<std::size_t>(R)), Q(static_cast<std::size_t>(R) * R);
  linalg::symmetric_eig(G.data(), R, w.data(), Q.data());  // ascending
  const double lmax = w[static_cast<std::size_t>(R - 1)];
  int good = 0;
  for (int j = R - 1; j >= 0; --j)
    if (std::isfinite(lmax) && lmax > 0 && w[static_cast<std::size_t>(j)] > lmax * kRankTolSq)
      ++good;
  // W (R x R): the first `good` columns are eigenvectors (descending) / sqrt(lambda).
  std::vector<double> W(static_cast<std::size_t>(R) * R, 0.0);
  for (int j = 0; j < good; ++j) {
    const int src = R - 1 - j;
    const double s = 1.0 / std::sqrt(w[static_cast<std::size_t>(src)]);
    for (int i = 0; i < R; ++i)
      W[static_cast<std::size_t>(i) * R + j] = Q[static_cast<std::size_t>(i) * R + src] * s;
  }
  kernels::ops::times_small_double(o.be, U, rows, R, W.data());  // columns >= good are now 0
  int added = 0;
  if (good > 0) {
    // Clean the good columns with one CholeskyQR pass (they are nearly orthonormal).
    std::vector<double> Ug(static_cast<std::size_t>(rows) * good);
    for (std::int64_t i = 0; i < rows; ++i)
      std::copy(U + i * R, U + i * R + good, Ug.data() + i * good);
    added += orthonormalize(o, Ug.data(), rows, good, rnd, col_offset, depth + 1);
    for (std::int64_t i = 0; i < rows; ++i)
      std::copy(Ug.data() + i * good, Ug.data() + (i + 1) * good, U + i * R);
  }
  if (good < R) {
    const int miss = R - good;
    std::vector<double> Z(static_cast<std::size_t>(rows) * miss);
    rnd(Z.data(), col_offset + good, miss);
    std::vector<double> Ug(static_cast<std::size_t>(rows) * std::max(good, 1));
    for (std::int64_t i = 0; i < rows; ++i)
      std::copy(U + i * R, U + i * R + good, Ug.data() + i * good);
    for (int pass = 0; pass < 2 && good > 0; ++pass) {  // Z -= Ug (Ug^T Z), twice
      std::vector<double> M(static_cast<std::size_t>(good) * miss);
      linalg::gemm(true, false, good, miss, rows, 1.0, Ug.data(), good, Z.data(), miss, 0.0,
                   M.data(), miss);
      o.hnet.sum(M.data(), M.size());
      linalg::gemm(false, false, rows, miss, good, -1.0, Ug.data(), good, M.data(), miss, 1.0,
                   Z.data(), miss);
    }
    added += miss + orthonormalize(o, Z.data(), rows, miss, rnd, col_offset + good, depth + 1);
    for (std::int64_t i = 0; i < rows; ++i)
      std::copy(Z.data() + i * miss, Z.data() + (i + 1) * miss, U + i * R + good);
  }
  return added;
}

/// The fallback of orthonormalize: G (o's memory) is numerically singular. Host backends
/// run it in place; a device backend copies U to the host, runs it there with a host
/// backend (sums over the host net) and copies the result back.
template <typename X>
int orthonormalize_fallback(OrthContext<X>& o, double* U, std::int64_t rows, int R,
                            const RandomFill& rnd, int col_offset, int depth) {
  const auto RR = static_cast<std::size_t>(R) * static_cast<std::size_t>(R);
  std::vector<double> Gh(RR);
  o.be.download_double(o.G.data(), RR, Gh.data());
  if (o.be.memory_space() == comm::MemorySpace::host)
    return orthonormalize_singular(o, U, rows, R, Gh, rnd, col_offset, depth);
  const auto n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(R);
  std::vector<double> Uh(std::max<std::size_t>(n, 1));
  o.be.download_double(U, n, Uh.data());
  auto host = kernels::make_backend<double>(kernels::BackendKind::reference);
  OrthContext<double> ho{*host, o.hnet, o.hnet};
  const int added = orthonormalize_singular(ho, Uh.data(), rows, R, Gh, rnd, col_offset, depth);
  o.be.upload_double(Uh.data(), n, U);
  return added;
}

}  // namespace

template <typename X>
int orthonormalize(OrthContext<X>& o, double* U, std::int64_t rows, int R, const RandomFill& rnd,
                   int col_offset, int depth) {
  if (R == 0) return 0;
  double* G = ensure_in(o.be, o.G, static_cast<std::size_t>(R) * static_cast<std::size_t>(R));
  for (int pass = 0; pass < 2; ++pass) {
    kernels::ops::gram_double(o.be, U, rows, R, G);
    o.gnet.sum(G, static_cast<std::size_t>(R) * static_cast<std::size_t>(R));
    // Already orthonormal to within kOrthSkip (the usual case for Y V / sigma of the Gram
    // method and for power steps near convergence): one CholeskyQR pass leaves rounding
    // (kOrthSkip above), so the second pass is skipped.
    double dev = 0;
    if (!kernels::ops::cholqr_step(o.be, U, rows, R, G, &dev))
      return orthonormalize_fallback(o, U, rows, R, rnd, col_offset, depth);
    if (pass == 0 && dev < kOrthSkip) break;
  }
  return 0;
}

template int orthonormalize<float>(OrthContext<float>&, double*, std::int64_t, int,
                                   const RandomFill&, int, int);
template int orthonormalize<double>(OrthContext<double>&, double*, std::int64_t, int,
                                    const RandomFill&, int, int);

// ---- DenseStage ----

template <typename T>
DenseStage<T>::DenseStage(kernels::Backend<T>& be, Net& net, Net& dnet, PhaseTimer<T>& clock)
    : be_(be), net_(net), dnet_(dnet), clock_(clock), orth_{be, dnet, net} {}

template <typename T>
double* DenseStage<T>::ensure(kernels::Array<double>& a, std::size_t n) {
  return ensure_in(be_, a, n);
}

template <typename T>
const double* DenseStage<T>::present(const RowsView& v, int R, const double* U) {
  if (v.pos_dev == nullptr) return U;
  double* P = ensure(p_, static_cast<std::size_t>(v.rows) * static_cast<std::size_t>(R));
  kernels::ops::gather_rows_double(be_, U, R, v.pos_dev, v.rows, P);
  return P;
}

template <typename T>
int DenseStage<T>::orthonormalize(double* U, std::int64_t rows, int R, const RandomFill& rnd) {
  const auto phase = clock_.start();
  const double n0 = dnet_.seconds + net_.seconds;  // the Gram's sums: comm, not orth
  const int added = detail::orthonormalize(orth_, U, rows, R, rnd);
  clock_.stop(phase, &times.orth, dnet_.seconds + net_.seconds - n0, false);
  return added;
}

template <typename T>
int DenseStage<T>::update_gram(const T* Y, const RowsView& v, int R, double* U,
                               const RandomFill& rnd) {
  const std::int64_t C = v.C;
  const auto CR = static_cast<std::size_t>(C) * static_cast<std::size_t>(R);
  // S = Y^T Y summed over ranks, then its top R eigenpairs where S is.
  auto phase = clock_.start();
  const auto CC = static_cast<std::size_t>(C) * static_cast<std::size_t>(C);
  double* S = ensure(s_, CC);
  kernels::ops::wide_gram(be_, Y, v.rows, C, S);
  const double n0 = dnet_.seconds;
  dnet_.sum(S, CC);
  clock_.stop(phase, &times.prod, dnet_.seconds - n0);
  phase = clock_.start();
  std::vector<double> w(static_cast<std::size_t>(R)), sc(static_cast<std::size_t>(R));
  double* V = ensure(v_, CR);
  kernels::ops::symmetric_eig_top(be_, S, static_cast<int>(C), R, w.data(), V);
  clock_.stop(phase, &times.eig, 0, false);  // symmetric_eig_top waits for w
  for (int j = 0; j < R; ++j) {
    const double wj = w[static_cast<std::size_t>(j)];
    sc[static_cast<std::size_t>(j)] =
        (w[0] > 0 && std::isfinite(w[0]) && wj > w[0] * kRankTolSq) ? 1.0 / std::sqrt(wj) : 0.0;
  }
  // U = Y V / sigma on the owned rows (columns scaled as they are scattered).
  phase = clock_.start();
  double* Z = ensure(z_, static_cast<std::size_t>(v.rows) * static_cast<std::size_t>(R));
  if (v.rows > 0) kernels::ops::wide_times(be_, Y, v.rows, C, V, R, Z);
  kernels::ops::scatter_rows_double(be_, Z, v.rows, R, v.pos_dev, v.own_len, sc.data(), U);
  clock_.stop(phase, &times.prod);
  // Y V / sigma is orthonormal up to rounding amplified by the Gram's condition; CholeskyQR2
  // restores it (and completes columns no data determines).
  return orthonormalize(U, v.own_len, R, rnd);
}

template <typename T>
int DenseStage<T>::update_subspace(const T* Y, const RowsView& v, int R, kernels::Array<double>& U,
                                   int steps, double tol, const RandomFill& rnd) {
  const std::int64_t C = v.C;
  const auto RR = static_cast<std::size_t>(R) * static_cast<std::size_t>(R);
  const auto CR = static_cast<std::size_t>(C) * static_cast<std::size_t>(R);
  const auto own = static_cast<std::size_t>(v.own_len) * static_cast<std::size_t>(R);
  int added = 0;
  double* B = ensure(b_, CR);
  double* Z = ensure(z_, static_cast<std::size_t>(v.rows) * static_cast<std::size_t>(R));
  double* M = ensure(m_, RR);
  // B = Y^T P summed over ranks (the sum's time is the caller's comm share).
  auto times_t_sum = [&](const double* P) {
    Timer t;
    kernels::ops::wide_times_t(be_, Y, v.rows, C, P, R, B);
    const double n0 = dnet_.seconds;
    dnet_.sum(B, CR);
    times.prod += t.seconds() - (dnet_.seconds - n0);
  };
  const double* P = present(v, R, U.data());
  for (int s = 0; s < steps; ++s) {
    times_t_sum(P);
    Timer t;
    if (v.rows > 0) kernels::ops::wide_times(be_, Y, v.rows, C, B, R, Z);
    double* Unew = ensure(unew_, std::max(own, U.size()));
    kernels::ops::scatter_rows_double(be_, Z, v.rows, R, v.pos_dev, v.own_len, nullptr, Unew);
    be_.synchronize();
    times.prod += t.seconds();
    added += orthonormalize(Unew, v.own_len, R, rnd);
    // Change of the subspace: || Unew - U (U^T Unew) ||_F (no cancellation, unlike angles).
    // It only decides whether another step runs: after the last one it is not computed (two
    // sums the host would wait for).
    bool converged = false;
    if (s + 1 < steps) {
      kernels::ops::inner_double(be_, U.data(), Unew, v.own_len, R, M);
      dnet_.sum(M, RR);
      double change = kernels::ops::subspace_change(be_, U.data(), Unew, M, v.own_len, R);
      net_.sum(&change, 1);
      converged = std::sqrt(change) < tol;
    }
    std::swap(U, unew_);
    P = present(v, R, U.data());
    if (converged) break;
  }
  // Rayleigh-Ritz: rotate the basis to the singular vectors' order (B^T B = U^T Y Y^T U);
  // the R x R eigen-solve runs on the host.
  times_t_sum(P);
  Timer t;
  std::vector<double> H(RR), w(static_cast<std::size_t>(R)), Q(RR), Qd(RR);
  kernels::ops::inner_double(be_, B, B, C, R, M);
  be_.download_double(M, RR, H.data());
  linalg::symmetrize_lower(R, H.data());
  linalg::symmetric_eig(H.data(), R, w.data(), Q.data());
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < R; ++j)
      Qd[static_cast<std::size_t>(i) * R + j] = Q[static_cast<std::size_t>(i) * R + (R - 1 - j)];
  be_.upload_double(Qd.data(), RR, M);
  kernels::ops::times_small_double(be_, U.data(), v.own_len, R, M);
  be_.synchronize();
  times.eig += t.seconds();
  return added;
}

template <typename T>
double DenseStage<T>::core(const T* Y, const RowsView& v, int R, const double* U) {
  const auto phase = clock_.start();
  const double n0 = dnet_.seconds;
  const double* P = present(v, R, U);
  core_size_ = static_cast<std::size_t>(v.C) * static_cast<std::size_t>(R);
  double* G = ensure(core_, core_size_);
  kernels::ops::wide_times_t(be_, Y, v.rows, v.C, P, R, G);
  // Summed over ranks on the data communicator (NCCL on GPUs); only ||G||^2 comes back.
  dnet_.sum(G, core_size_);
  const double norm2 = kernels::ops::sum_squares_double(be_, G, core_size_);
  clock_.stop(phase, &times.core, dnet_.seconds - n0, false);  // ||G||^2 comes back
  return norm2;
}

template class DenseStage<float>;
template class DenseStage<double>;

// ---- TuckerFactors ----

template <typename T>
TuckerFactors<T>::TuckerFactors(kernels::Backend<T>& be, const comm::Communicator& c,
                                const comm::Communicator& dc,
                                const std::vector<std::uint64_t>& dims,
                                const std::vector<int>& ranks,
                                const std::vector<std::int64_t>& own_len,
                                const std::vector<std::int64_t>& block)
    : be_(be), c_(c), dc_(dc), dims_(dims), ranks_(ranks), len_(own_len), block_(block) {
  const std::size_t N = dims.size();
  own_.resize(N);
  backend_.resize(N);
  full_.resize(N);
  stale_.assign(N, 0);
  std::int64_t most = 1;
  for (std::size_t n = 0; n < N; ++n) {
    const auto R = static_cast<std::size_t>(ranks[n]);
    backend_[n] = be.allocate(static_cast<std::size_t>(dims[n]) * R);
    own_[n] = be.allocate_double(std::max<std::size_t>(static_cast<std::size_t>(len_[n]) * R, 1));
    most = std::max(most, block_[n] * ranks[n]);
  }
  if (c.size() > 1) {
    send_ = be.allocate(static_cast<std::size_t>(most));
    recv_ = be.allocate(static_cast<std::size_t>(most) * static_cast<std::size_t>(c.size()));
  }
}

template <typename T>
void TuckerFactors<T>::set_owned(int n, const std::vector<double>& host) {
  const auto k = static_cast<std::size_t>(n);
  TESSERA_EXPECTS(host.size() == static_cast<std::size_t>(len_[k]) * ranks_[k],
                  "TuckerFactors::set_owned: " << host.size() << " values for mode " << n);
  be_.upload_double(host.data(), host.size(), own_[k].data());
}

template <typename T>
void TuckerFactors<T>::publish(int n, PhaseTimer<T>& clock, double* t_svd,
                               const std::vector<double*>& t_comm, bool enqueue) {
  const auto k = static_cast<std::size_t>(n);
  const auto R = static_cast<std::size_t>(ranks_[k]);
  const auto mine = static_cast<std::size_t>(len_[k]) * R;
  if (c_.size() == 1) {  // the owned rows are the whole factor
    const auto phase = clock.start();
    kernels::ops::convert_from_double(be_, own_[k].data(), mine, backend_[k].data());
    clock.stop(phase, t_svd);
    stale_[k] = 1;
    return;
  }
  // The same values as gathering in double and converting: the conversion is per element.
  const auto blk = static_cast<std::size_t>(block_[k]) * R;
  if (enqueue) {  // no wait: the next TTMc, queued after the copy, reads the factor
    const auto phase = clock.start();
    kernels::ops::convert_from_double(be_, own_[k].data(), mine, send_.data());
    if (blk > mine) be_.fill(send_.data() + mine, blk - mine, T(0));
    clock.stop(phase, t_svd);
    const std::size_t a = clock.comm_start();
    dc_.enqueue_allgather_raw(send_.data(), recv_.data(), blk, comm::data_type_of<T>(),
                              be_.native_stream());
    be_.copy(recv_.data(), static_cast<std::size_t>(dims_[k]) * R, backend_[k].data());
    clock.comm_stop(a, t_comm);
    stale_[k] = 1;
    return;
  }
  Timer t;
  kernels::ops::convert_from_double(be_, own_[k].data(), mine, send_.data());
  if (blk > mine) be_.fill(send_.data() + mine, blk - mine, T(0));
  *t_svd += t.seconds();
  t.reset();
  dc_.allgather_raw(send_.data(), recv_.data(), blk, comm::data_type_of<T>());
  be_.copy(recv_.data(), static_cast<std::size_t>(dims_[k]) * R, backend_[k].data());
  be_.synchronize();
  for (double* x : t_comm) *x += t.seconds();
  stale_[k] = 1;
}

template <typename T>
void TuckerFactors<T>::publish_whole(int n, const double* whole, PhaseTimer<T>& clock,
                                     double* t_svd) {
  const auto k = static_cast<std::size_t>(n);
  const auto phase = clock.start();
  kernels::ops::convert_from_double(be_, whole, static_cast<std::size_t>(dims_[k]) * ranks_[k],
                                    backend_[k].data());
  clock.stop(phase, t_svd);
  stale_[k] = 1;
}

template <typename T>
void TuckerFactors<T>::gather_full() {
  const int P = c_.size();
  for (std::size_t k = 0; k < dims_.size(); ++k) {
    if (!stale_[k]) continue;
    const auto R = static_cast<std::size_t>(ranks_[k]);
    const auto mine = static_cast<std::size_t>(len_[k]) * R;
    auto& full = full_[k];
    if (P == 1) {
      full.resize(mine);
      be_.download_double(own_[k].data(), mine, full.data());
    } else {
      std::vector<double> send(static_cast<std::size_t>(block_[k]) * R, 0.0);
      be_.download_double(own_[k].data(), mine, send.data());
      full.assign(send.size() * static_cast<std::size_t>(P), 0.0);
      c_.allgather(send.data(), full.data(), send.size());
      full.resize(static_cast<std::size_t>(dims_[k]) * R);
    }
    stale_[k] = 0;
  }
}

template class TuckerFactors<float>;
template class TuckerFactors<double>;

}  // namespace tessera::algo::detail

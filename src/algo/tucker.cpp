#include "algo/tucker.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <type_traits>

#include "algo/host_tier.hpp"
#include "algo/tucker_dense.hpp"
#include "algo/tucker_resume.hpp"
#include "comm/mpi_communicator.hpp"
#include "kernels/row_chunks.hpp"
#include "kernels/ttmc.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/rng.hpp"

#if TESSERA_HAVE_SCALAPACK
extern "C" {
// BLACS (C interface) and ScaLAPACK (Fortran; trailing size_t = hidden CHARACTER lengths).
int Csys2blacs_handle(MPI_Comm comm);
void Cfree_blacs_system_handle(int handle);
void Cblacs_gridinit(int* context, const char* order, int nprow, int npcol);
void Cblacs_gridinfo(int context, int* nprow, int* npcol, int* myrow, int* mycol);
void Cblacs_gridexit(int context);
void descinit_(int* desc, const int* m, const int* n, const int* mb, const int* nb,
               const int* irsrc, const int* icsrc, const int* ictxt, const int* lld, int* info);
void pdgesvd_(const char* jobu, const char* jobvt, const int* m, const int* n, double* a,
              const int* ia, const int* ja, const int* desca, double* s, double* u, const int* iu,
              const int* ju, const int* descu, double* vt, const int* ivt, const int* jvt,
              const int* descvt, double* work, const int* lwork, int* info, std::size_t,
              std::size_t);
}
#endif

namespace tessera::algo {

SvdMethod parse_svd_method(const std::string& s) {
  if (s == "gram") return SvdMethod::gram;
  if (s == "subspace") return SvdMethod::subspace;
  if (s == "scalapack") return SvdMethod::scalapack;
  TESSERA_INPUT_CHECK(false, "unknown --svd '" << s << "': expected gram, subspace or scalapack");
  return SvdMethod::gram;
}

std::string to_string(SvdMethod m) {
  switch (m) {
    case SvdMethod::gram:
      return "gram";
    case SvdMethod::subspace:
      return "subspace";
    case SvdMethod::scalapack:
      return "scalapack";
  }
  return "?";
}

TuckerInit parse_tucker_init(const std::string& s) {
  if (s == "random") return TuckerInit::random;
  if (s == "hosvd") return TuckerInit::hosvd;
  TESSERA_INPUT_CHECK(false, "unknown --init '" << s << "': expected random or hosvd");
  return TuckerInit::random;
}

std::string to_string(TuckerInit i) {
  return i == TuckerInit::random ? "random" : "hosvd";
}

bool scalapack_available() {
#if TESSERA_HAVE_SCALAPACK
  return true;
#else
  return false;
#endif
}

std::vector<int> parse_ranks(const std::string& s, int order) {
  std::vector<int> out;
  std::string tok;
  auto flush = [&] {
    TESSERA_INPUT_CHECK(!tok.empty(), "--ranks '" << s
                                                  << "': expected positive integers separated "
                                                     "by commas, e.g. --ranks 16,16,16");
    long long v = 0;
    for (char ch : tok) {
      TESSERA_INPUT_CHECK(ch >= '0' && ch <= '9' && v < (1ll << 31),
                          "--ranks '" << s << "': '" << tok << "' is not a positive integer");
      v = v * 10 + (ch - '0');
    }
    TESSERA_INPUT_CHECK(v >= 1 && v <= std::numeric_limits<int>::max(),
                        "--ranks '" << s << "': rank " << tok << " must be at least 1");
    out.push_back(static_cast<int>(v));
    tok.clear();
  };
  for (char ch : s) {
    if (ch == ',' || ch == 'x' || ch == 'X')
      flush();
    else if (ch != ' ')
      tok.push_back(ch);
  }
  flush();
  if (out.size() == 1 && order > 1) out.assign(static_cast<std::size_t>(order), out[0]);
  TESSERA_INPUT_CHECK(static_cast<int>(out.size()) == order,
                      "--ranks '" << s << "' gives " << out.size() << " ranks for an order-"
                                  << order << " tensor: give one rank per mode (or one for all)");
  return out;
}

void check_tucker_ranks(const std::vector<std::uint64_t>& dims, const std::vector<int>& ranks) {
  const int N = static_cast<int>(dims.size());
  TESSERA_INPUT_CHECK(N >= 2 && N <= kMaxOrder, "Tucker needs a tensor of order 2.."
                                                    << kMaxOrder << " (this one has order " << N
                                                    << ")");
  TESSERA_INPUT_CHECK(static_cast<int>(ranks.size()) == N,
                      "--ranks: " << ranks.size() << " rank(s) given for an order-" << N
                                  << " tensor (dims " << format_dims(dims)
                                  << "): give one rank per mode");
  for (int n = 0; n < N; ++n) {
    const int R = ranks[static_cast<std::size_t>(n)];
    TESSERA_INPUT_CHECK(R >= 1, "--ranks: the rank of mode " << n << " is " << R
                                                             << "; every rank must be at least 1");
    TESSERA_INPUT_CHECK(static_cast<std::uint64_t>(R) <= dims[static_cast<std::size_t>(n)],
                        "--ranks: the rank of mode "
                            << n << " (" << R << ") exceeds its dimension "
                            << dims[static_cast<std::size_t>(n)] << " (dims " << format_dims(dims)
                            << "); use at most " << dims[static_cast<std::size_t>(n)]);
  }
  for (int n = 0; n < N; ++n) {
    long double other = 1;
    for (int m = 0; m < N; ++m)
      if (m != n) other *= ranks[static_cast<std::size_t>(m)];
    TESSERA_INPUT_CHECK(ranks[static_cast<std::size_t>(n)] <= other,
                        "--ranks: the rank of mode "
                            << n << " (" << ranks[static_cast<std::size_t>(n)]
                            << ") exceeds the product of the other modes' ranks ("
                            << static_cast<double>(other) << "): the mode-" << n
                            << " unfolding of the core has only that many columns; use R_n <= "
                               "the product of the other ranks");
  }
}

double tucker_initial_value(std::uint64_t seed, int mode, std::uint64_t row, int col) {
  return 2.0 * uniform01(hash_keys(seed, static_cast<std::uint64_t>(mode) + 0x200, row,
                                   static_cast<std::uint64_t>(col))) -
         1.0;
}

namespace {

using detail::kRankTolSq;
using detail::Net;
using detail::RandomFill;
using detail::RowsView;

std::string bytes_str(double b) {
  const char* u[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  int i = 0;
  while (b >= 1000 && i < 5) {
    b /= 1000;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g %s", b, u[i]);
  return buf;
}

std::string ranks_str(const std::vector<int>& r) {
  std::ostringstream os;
  for (std::size_t i = 0; i < r.size(); ++i) os << (i ? "," : "") << r[i];
  return os.str();
}

#if TESSERA_HAVE_SCALAPACK
/// A BLACS P x 1 process grid over an MPI communicator, released on scope exit.
class BlacsGrid {
 public:
  explicit BlacsGrid(const comm::Communicator& c) {
    const auto* mc = dynamic_cast<const comm::MpiCommunicator*>(&c);
    TESSERA_EXPECTS(mc != nullptr, "--svd scalapack needs an MPI communicator");
    handle_ = Csys2blacs_handle(mc->mpi_comm());
    ctxt_ = handle_;
    Cblacs_gridinit(&ctxt_, "R", c.size(), 1);
    int nprow = 0, npcol = 0, col = 0;
    Cblacs_gridinfo(ctxt_, &nprow, &npcol, &row_, &col);
    TESSERA_EXPECTS(
        nprow == c.size() && npcol == 1 && row_ == c.rank(),
        "BLACS grid disagrees with the communicator (row " << row_ << ", rank " << c.rank() << ")");
  }
  ~BlacsGrid() {
    Cblacs_gridexit(ctxt_);
    Cfree_blacs_system_handle(handle_);
  }
  BlacsGrid(const BlacsGrid&) = delete;
  BlacsGrid& operator=(const BlacsGrid&) = delete;
  int context() const { return ctxt_; }

 private:
  int handle_ = -1, ctxt_ = -1, row_ = -1;
};
#else
class BlacsGrid {
 public:
  explicit BlacsGrid(const comm::Communicator&) {}
};
#endif

/// --svd scalapack: U (own_len x R, host) := the top R left singular vectors of the
/// combined rows Y (host), zero in the rows this rank does not hold; the caller
/// orthonormalises (through the backend) and completes undetermined columns.
template <typename T>
void update_scalapack(const T* Y, const RowsView& v, int R, std::vector<double>& U, Net& net,
                      const BlacsGrid& grid) {
#if TESSERA_HAVE_SCALAPACK
  const int P = net.c.size();
  const std::int64_t C = v.C;
  // Square nb x nb blocks on a P x 1 grid. Rank p's local row j is global row
  // ((j / nb) * P + p) * nb + j % nb, so every rank's block is exactly its own rows padded
  // with zero rows to K (singular vectors do not depend on the row order; zero rows only
  // add zero entries to U).
  const int nb = static_cast<int>(std::min<std::int64_t>(64, std::max<std::int64_t>(C, 1)));
  double kmax = static_cast<double>(v.rows);
  if (P > 1) {
    Timer t;
    net.c.allreduce(&kmax, 1, comm::ReduceOp::max);
    net.seconds += t.seconds();
  }
  const std::int64_t K =
      std::max<std::int64_t>(1, (static_cast<std::int64_t>(kmax) + nb - 1) / nb) * nb;
  TESSERA_INPUT_CHECK(static_cast<double>(K) * P < 2e9 && C < (1ll << 31),
                      "--svd scalapack: the matrix (" << K * P << " x " << C
                                                      << ") is too large for ScaLAPACK's int "
                                                         "indices; use --svd gram or subspace");
  const int M = static_cast<int>(K * P), Nc = static_cast<int>(C), LLD = static_cast<int>(K);
  const int size = std::min(M, Nc);
  std::vector<double> A(static_cast<std::size_t>(K * C), 0.0);  // column-major K x C
  std::vector<double> buf;
  kernels::for_double_row_chunks(Y, v.rows, C, buf,
                                 [&](const double* y, std::int64_t r0, std::int64_t nr) {
                                   for (std::int64_t j = 0; j < nr; ++j)
                                     for (std::int64_t c = 0; c < C; ++c)
                                       A[static_cast<std::size_t>(c * K + r0 + j)] = y[j * C + c];
                                 });
  std::vector<double> Uc(static_cast<std::size_t>(K) * size), s(static_cast<std::size_t>(size));
  int descA[9], descU[9], info = 0;
  const int zero = 0, one = 1, ctxt = grid.context();
  descinit_(descA, &M, &Nc, &nb, &nb, &zero, &zero, &ctxt, &LLD, &info);
  TESSERA_EXPECTS(info == 0, "ScaLAPACK descinit (A) failed (info " << info << ")");
  descinit_(descU, &M, &size, &nb, &nb, &zero, &zero, &ctxt, &LLD, &info);
  TESSERA_EXPECTS(info == 0, "ScaLAPACK descinit (U) failed (info " << info << ")");
  double vt_dummy = 0, wq = 0;
  int lwork = -1;
  pdgesvd_("V", "N", &M, &Nc, A.data(), &one, &one, descA, s.data(), Uc.data(), &one, &one, descU,
           &vt_dummy, &one, &one, descA, &wq, &lwork, &info, 1, 1);
  TESSERA_EXPECTS(info == 0, "ScaLAPACK pdgesvd workspace query failed (info " << info << ")");
  lwork = static_cast<int>(wq) + 1;
  std::vector<double> work(static_cast<std::size_t>(lwork));
  pdgesvd_("V", "N", &M, &Nc, A.data(), &one, &one, descA, s.data(), Uc.data(), &one, &one, descU,
           &vt_dummy, &one, &one, descA, work.data(), &lwork, &info, 1, 1);
  TESSERA_EXPECTS(info == 0, "ScaLAPACK pdgesvd failed (info " << info << ")");
  std::vector<double> Z(static_cast<std::size_t>(v.rows) * R, 0.0);
  for (int j = 0; j < std::min(R, size); ++j) {
    const double sj = s[static_cast<std::size_t>(j)];
    if (!(s[0] > 0) || !(sj * sj > s[0] * s[0] * kRankTolSq)) continue;
    for (std::int64_t i = 0; i < v.rows; ++i)
      Z[static_cast<std::size_t>(i * R + j)] = Uc[static_cast<std::size_t>(j) * K + i];
  }
  U.assign(static_cast<std::size_t>(v.own_len) * R, 0.0);
  for (std::int64_t j = 0; j < v.rows; ++j)
    std::copy(Z.begin() + j * R, Z.begin() + (j + 1) * R, U.begin() + v.pos[j] * R);
#else
  (void)Y, (void)v, (void)R, (void)U, (void)net, (void)grid;
  TESSERA_INPUT_CHECK(false, "--svd scalapack: this tessera was built without ScaLAPACK");
#endif
}

/// Per mode: the local TTMc rows, their owners, and how received rows combine.
struct ModePlan {
  std::int64_t cols = 0;
  std::vector<index_t> local;           ///< rows of the local TTMc output (global labels)
  std::int64_t lo = 0, len = 0, b = 0;  ///< owned range [lo, lo + len); b = padded block rows
  std::vector<std::int64_t> send_rows, recv_rows;  ///< per peer (P > 1)
  std::int64_t recv_total = 0;
  std::vector<std::int64_t> own_pos;  ///< combined rows, relative to lo, sorted
  std::vector<std::int64_t> src_ptr,
      src_row;                 ///< combined row j sums received rows src_row[src_ptr[j]..]
  double scratch_per_col = 0;  ///< backend TTMc scratch bytes / cols
};

/// Per-rank counts the memory estimate needs, for every mode.
struct RankCounts {
  std::vector<double> local, recv, own, scratch;  ///< per mode
};

struct Estimate {
  double semi = 0, total = 0;
};

/// wide_scratch(C): backend memory the wide products take for C columns
/// (Backend::wide_scratch_bytes: float rows widened to double a chunk at a time).
Estimate estimate_rank(const RankCounts& rc, const std::vector<std::uint64_t>& dims,
                       const std::vector<int>& ranks, std::size_t vsize, int P, SvdMethod svd,
                       const std::function<double(std::int64_t)>& wide_scratch) {
  const int N = static_cast<int>(dims.size());
  double out = 0, recv = 0, own = 0, work = 0, factors = 0;
  for (int n = 0; n < N; ++n) {
    double C = 1;
    for (int m = 0; m < N; ++m)
      if (m != n) C *= ranks[static_cast<std::size_t>(m)];
    const double R = ranks[static_cast<std::size_t>(n)];
    const auto k = static_cast<std::size_t>(n);
    out = std::max(out, rc.local[k] * C * static_cast<double>(vsize) + rc.scratch[k] * C);
    if (P > 1) {
      recv = std::max(recv, rc.recv[k] * C * static_cast<double>(vsize));
      own = std::max(own, rc.own[k] * C * static_cast<double>(vsize));
    }
    const double chunk = wide_scratch(static_cast<std::int64_t>(C));
    const double rows_own = std::max(rc.own[k], P > 1 ? 0.0 : rc.local[k]);
    double w = chunk + 3 * rows_own * R * 8;
    switch (svd) {
      case SvdMethod::gram:
        w += (2 * C * C + C * R) * 8;
        break;
      case SvdMethod::subspace:
        w += 2 * C * R * 8;
        break;
      case SvdMethod::scalapack: {
        const double K = std::ceil(std::max(rows_own, 1.0) / 64) * 64;
        w += (K * C + K * std::min(K * P, C) + (K + C) * 64 * 4) * 8;
        break;
      }
    }
    work = std::max(work, w);
    factors += static_cast<double>(dims[k]) * R * (8.0 * 2 + static_cast<double>(vsize));
  }
  Estimate e;
  e.semi = out + recv + own;
  e.total = e.semi + work + factors;
  return e;
}

}  // namespace

namespace {

/// Appends an iteration to the result (history, phases, fit) and prints its line on rank
/// 0, with the split of the factor-update time at -v.
void record_iteration(const TuckerIteration& rec, TuckerResult& res, bool print) {
  res.history.push_back(rec);
  res.phases.add("ttmc", rec.ttmc);
  res.phases.add("comm", rec.comm);
  res.phases.add("svd", rec.svd);
  res.fit = rec.fit;
  res.core_norm = rec.core_norm;
  res.iterations = rec.iter;
  if (!print) return;
  const double tot = std::max(rec.seconds, 1e-12);
  char line[256];
  std::snprintf(line, sizeof(line),
                "  iter %3d  fit %.6f  delta %+.3e  %.4f s  (ttmc %2.0f%%  comm %2.0f%%  "
                "svd %2.0f%%)",
                rec.iter, rec.fit, rec.delta, rec.seconds, 100 * rec.ttmc / tot,
                100 * rec.comm / tot, 100 * rec.svd / tot);
  log::info(line);
  std::snprintf(line, sizeof(line),
                "            svd split: products %.4f s, eigen-solves %.4f s, "
                "orthonormalisation %.4f s, core %.4f s, rest %.4f s",
                rec.svd_products, rec.svd_eig, rec.svd_orth, rec.svd_core,
                rec.svd - rec.svd_products - rec.svd_eig - rec.svd_orth - rec.svd_core);
  log::debug(line);
}

/// The options every rank sees alike (so every rank throws the same InputError); returns
/// the TTMc output columns of every mode.
std::vector<std::int64_t> check_options(const std::vector<std::uint64_t>& dims,
                                        const TuckerOptions& opt) {
  const int N = static_cast<int>(dims.size());
  check_tucker_ranks(dims, opt.ranks);
  TESSERA_INPUT_CHECK(opt.max_iters >= 1,
                      "--iters must be at least 1 (got " << opt.max_iters << ")");
  TESSERA_INPUT_CHECK(opt.tol >= 0 && std::isfinite(opt.tol), "--tol must be >= 0");
  TESSERA_INPUT_CHECK(opt.subspace_steps >= 1,
                      "the subspace method needs at least one power "
                      "step per update");
  TESSERA_INPUT_CHECK(opt.svd != SvdMethod::scalapack || scalapack_available(),
                      "--svd scalapack: this tessera was built without ScaLAPACK (reconfigure "
                      "with -DTESSERA_WITH_SCALAPACK=ON where libscalapack is installed), or use "
                      "--svd gram or --svd subspace");
  std::vector<std::int64_t> cols(static_cast<std::size_t>(N));
  for (int n = 0; n < N; ++n) {
    cols[static_cast<std::size_t>(n)] = kernels::ttmc_output_cols(opt.ranks, n);
    TESSERA_INPUT_CHECK(opt.svd != SvdMethod::gram || cols[static_cast<std::size_t>(n)] <= 4096,
                        "--svd gram: mode " << n << " needs a " << cols[static_cast<std::size_t>(n)]
                                            << " x " << cols[static_cast<std::size_t>(n)]
                                            << " Gram matrix (the product of the other modes' "
                                               "ranks); use --svd subspace or smaller ranks");
  }
  return cols;
}

/// ||X|| (into res.norm_x) and the scale the loop computes with.
struct NormScale {
  double norm_x2 = 0;  ///< ||cs X||^2
  double cs = 1;       ///< a power of two: the loop runs on cs X
  double norm_cx = 0;  ///< ||cs X||
};

/// `mine2` is this rank's sum of squared values; `mine` its scaled 2-norm (called only when
/// the plain sum leaves the safe range).
template <typename T>
NormScale norm_and_scale(double mine2, const std::function<double()>& mine,
                         const comm::Communicator& c, const TuckerOptions& opt, TuckerResult& res) {
  // ||X||: the plain sum of squares while it is far from the ends of the double range
  // (results as ever), else scaled norms (values near 1e200 or 1e-200), as CP-ALS does.
  NormScale s;
  s.norm_x2 = mine2;
  c.allreduce(&s.norm_x2, 1);
  const bool plain_norm =
      std::isfinite(s.norm_x2) && s.norm_x2 >= 0x1p-1000 && s.norm_x2 <= 0x1p+1000;
  if (!plain_norm) {
    double own = mine(), mx = own;
    c.allreduce(&mx, 1, comm::ReduceOp::max);
    double r = mx > 0 && std::isfinite(mx) ? (own / mx) * (own / mx) : 0.0;
    c.allreduce(&r, 1);
    res.norm_x = mx > 0 && std::isfinite(mx) ? mx * std::sqrt(r) : mx;
  } else {
    res.norm_x = std::sqrt(s.norm_x2);
  }
  TESSERA_INPUT_CHECK(res.norm_x > 0, opt.tensor_name << ": every value is 0 (no nonzero values): "
                                                         "nothing to decompose");
  TESSERA_INPUT_CHECK(std::isfinite(res.norm_x),
                      opt.tensor_name
                          << ": ||X|| = " << res.norm_x
                          << ": the 2-norm of the values is not a finite double (values "
                             "too large, or this memory tier sums squares without "
                             "scaling); rescale the values");
  // The loop computes on cs X (cs a power of two, exact) when ||X|| is far from 1, so the
  // Grams of the TTMc rows, the core and the fit stay in range: TTMc outputs are scaled as
  // they come out and the core is divided by cs in the model and the saved states.
  const int norm_exp = std::ilogb(res.norm_x);
  const int lo_exp = std::is_same_v<T, float> ? -20 : -128;
  const int hi_exp = std::is_same_v<T, float> ? 32 : 128;
  s.cs = norm_exp >= lo_exp && norm_exp <= hi_exp
             ? 1.0
             : std::ldexp(1.0, -std::clamp(norm_exp, std::is_same_v<T, float> ? -100 : -1000,
                                           std::is_same_v<T, float> ? 100 : 1000));
  if (s.cs != 1.0 || !plain_norm) s.norm_x2 = (s.cs * res.norm_x) * (s.cs * res.norm_x);
  s.norm_cx = s.cs * res.norm_x;
  return s;
}

/// Row ownership (mode-n rows cut into P ranges of ceil(I_n / P)) and the plan that
/// combines the TTMc rows on their owners: one index exchange per mode (collective).
void plan_combine(std::vector<ModePlan>& plan, const std::vector<std::uint64_t>& dims,
                  const comm::Communicator& c) {
  const int P = c.size();
  for (std::size_t n = 0; n < dims.size(); ++n) {
    auto& mp = plan[n];
    const auto I = static_cast<std::int64_t>(dims[n]);
    mp.b = (I + P - 1) / P;
    mp.lo = std::min<std::int64_t>(mp.b * c.rank(), I);
    mp.len = std::min<std::int64_t>(mp.b * (c.rank() + 1), I) - mp.lo;
    if (P == 1) {
      mp.own_pos.assign(mp.local.begin(), mp.local.end());
      continue;
    }
    mp.send_rows.assign(static_cast<std::size_t>(P), 0);
    for (index_t i : mp.local)
      ++mp.send_rows[static_cast<std::size_t>(static_cast<std::int64_t>(i) / mp.b)];
    const std::vector<index_t> rin = c.alltoallv(mp.local, mp.send_rows, &mp.recv_rows);
    mp.recv_total = static_cast<std::int64_t>(rin.size());
    std::vector<std::int64_t> order(rin.size());
    for (std::size_t k = 0; k < rin.size(); ++k) order[k] = static_cast<std::int64_t>(k);
    // Stable by row, so duplicates are summed in rank order on every rank count alike.
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
      return rin[static_cast<std::size_t>(a)] < rin[static_cast<std::size_t>(b)];
    });
    mp.src_ptr.push_back(0);
    for (std::size_t k = 0; k < order.size(); ++k) {
      const index_t i = rin[static_cast<std::size_t>(order[k])];
      if (k == 0 || i != rin[static_cast<std::size_t>(order[k - 1])]) {
        if (k > 0) mp.src_ptr.push_back(static_cast<std::int64_t>(k));
        mp.own_pos.push_back(static_cast<std::int64_t>(i) - mp.lo);
      }
      mp.src_row.push_back(order[k]);
    }
    if (!order.empty()) mp.src_ptr.push_back(static_cast<std::int64_t>(order.size()));
  }
}

/// The memory plan: every rank evaluates the same estimate from all ranks' counts
/// (collective), records it in res.memory, prints it and refuses, naming ranks that
/// would fit, when it is over opt.memory_limit.
void plan_memory(const std::vector<ModePlan>& plan, const std::vector<std::uint64_t>& dims,
                 const std::vector<std::int64_t>& cols, std::size_t vsize,
                 const std::function<double(std::int64_t)>& wide_scratch,
                 const comm::Communicator& c, const TuckerOptions& opt, TuckerResult& res) {
  const int N = static_cast<int>(dims.size()), P = c.size();
  const std::vector<int>& ranks = opt.ranks;
  std::vector<double> mine(static_cast<std::size_t>(4 * N)),
      all(static_cast<std::size_t>(4 * N * P));
  for (int n = 0; n < N; ++n) {
    const auto& mp = plan[static_cast<std::size_t>(n)];
    mine[static_cast<std::size_t>(4 * n)] = static_cast<double>(mp.local.size());
    mine[static_cast<std::size_t>(4 * n + 1)] = static_cast<double>(mp.recv_total);
    mine[static_cast<std::size_t>(4 * n + 2)] = static_cast<double>(mp.own_pos.size());
    mine[static_cast<std::size_t>(4 * n + 3)] = mp.scratch_per_col;
  }
  c.allgather(mine.data(), all.data(), mine.size());
  std::vector<RankCounts> counts(static_cast<std::size_t>(P));
  for (int p = 0; p < P; ++p)
    for (int n = 0; n < N; ++n) {
      const double* q = all.data() + static_cast<std::size_t>(4 * (N * p + n));
      auto& rc = counts[static_cast<std::size_t>(p)];
      rc.local.push_back(q[0]);
      rc.recv.push_back(q[1]);
      rc.own.push_back(q[2]);
      rc.scratch.push_back(q[3]);
    }
  auto estimate = [&](const std::vector<int>& r) {
    Estimate worst;
    for (const auto& rc : counts) {
      const Estimate e = estimate_rank(rc, dims, r, vsize, P, opt.svd, wide_scratch);
      worst.semi = std::max(worst.semi, e.semi);
      worst.total = std::max(worst.total, e.total);
    }
    return worst;
  };
  const Estimate need = estimate(ranks);
  auto& mem = res.memory;
  mem.cols = cols;
  for (int n = 0; n < N; ++n) {
    std::int64_t a = 0, r = 0, o = 0;
    for (const auto& rc : counts) {
      a = std::max(a, static_cast<std::int64_t>(rc.local[static_cast<std::size_t>(n)]));
      r = std::max(r, static_cast<std::int64_t>(rc.recv[static_cast<std::size_t>(n)]));
      o = std::max(o, static_cast<std::int64_t>(rc.own[static_cast<std::size_t>(n)]));
    }
    mem.ttmc_rows.push_back(a);
    mem.received_rows.push_back(r);
    mem.owned_rows.push_back(o);
  }
  const double cap = static_cast<double>(std::numeric_limits<std::size_t>::max()) / 2;
  mem.semi_sparse_bytes = static_cast<std::size_t>(std::min(need.semi, cap));
  mem.total_bytes = static_cast<std::size_t>(std::min(need.total, cap));
  std::ostringstream plan_text;
  for (int n = 0; n < N; ++n) {
    plan_text << (n ? "; " : "") << "mode " << n << ": "
              << mem.ttmc_rows[static_cast<std::size_t>(n)] << " rows x "
              << cols[static_cast<std::size_t>(n)] << " cols ("
              << bytes_str(static_cast<double>(mem.ttmc_rows[static_cast<std::size_t>(n)]) *
                           static_cast<double>(cols[static_cast<std::size_t>(n)] *
                                               static_cast<std::int64_t>(vsize)))
              << ")";
    if (P > 1)
      plan_text << ", " << mem.received_rows[static_cast<std::size_t>(n)] << " received, "
                << mem.owned_rows[static_cast<std::size_t>(n)] << " combined";
  }
  if (opt.print_iterations) {
    log::info("TTMc semi-sparse rows per rank (largest rank): " + plan_text.str());
    log::info("memory per rank: " + bytes_str(need.semi) + " for the semi-sparse rows, " +
              bytes_str(need.total) + " with SVD workspace and factors" +
              (opt.memory_limit > 0
                   ? " (limit " + bytes_str(static_cast<double>(opt.memory_limit)) + ")"
                   : ""));
  }
  if (opt.memory_limit > 0 && need.total > static_cast<double>(opt.memory_limit)) {
    std::ostringstream msg;
    msg << "Tucker with ranks " << ranks_str(ranks) << " needs about " << bytes_str(need.total)
        << " per rank (semi-sparse TTMc rows " << bytes_str(need.semi) << ": " << plan_text.str()
        << "), over the limit of " << bytes_str(static_cast<double>(opt.memory_limit)) << "; ";
    const int rmax = *std::max_element(ranks.begin(), ranks.end());
    bool found = false;
    for (int r = rmax - 1; r >= 1 && !found; --r) {
      std::vector<int> cand(ranks);
      for (auto& x : cand) x = std::min(x, r);
      bool valid = true;
      try {
        check_tucker_ranks(dims, cand);
      } catch (const InputError&) {
        valid = false;
      }
      if (!valid) continue;
      const Estimate e = estimate(cand);
      if (e.total <= static_cast<double>(opt.memory_limit)) {
        msg << "ranks " << ranks_str(cand) << " would fit (about " << bytes_str(e.total)
            << " per rank)";
        found = true;
      }
    }
    if (!found) msg << "no smaller ranks fit";
    msg << "; more MPI ranks (fewer rows each) or a larger memory limit also help";
    TESSERA_INPUT_CHECK(false, msg.str());
  }
}

/// One run of HOOI after the setup: the prepared tensor, the combine plan, the buffers,
/// the factors and the dense stage of this rank, and the loops over them.
template <typename T>
class Hooi {
 public:
  Hooi(const partition::Distribution& dist, std::unique_ptr<kernels::TensorHandle<T>> X,
       std::vector<ModePlan> plan, kernels::Backend<T>& be, const comm::Communicator& c,
       const comm::Communicator& dc, const TuckerOptions& opt, const NormScale& ns,
       TuckerResult& res);
  /// Initial factors (random, then HOSVD when asked) or the resumed state's.
  void init();
  /// HOOI iterations until the tolerance or max_iters.
  void iterate();
  /// The model, complete on every rank, rows in original index order (collective).
  void finish();

 private:
  /// Keyed random values for the owned rows of mode n (salt separates init and completion).
  RandomFill random_fill(int n, std::uint64_t salt) const;
  void publish(int n) { factors_.publish(n, &t_svd_, &t_comm_); }
  /// TTMc of mode n with the current backend factors, combined on the owners; returns the
  /// combined rows (P == 1: the TTMc output itself).
  const T* ttmc_combined(int n);
  RowsView view_of(int n) const;
  /// New U_n (owned rows, backend memory, in place) from the combined rows Y.
  void factor_update(int n, const T* Y);
  /// The last core on the host (copied from backend memory when newer there).
  const std::vector<double>& host_core();
  std::vector<double> unscaled(std::vector<double> g) const;

  const partition::Distribution& dist_;
  std::unique_ptr<kernels::TensorHandle<T>> X_;
  std::vector<ModePlan> plan_;
  kernels::Backend<T>& be_;
  const comm::Communicator& c_;
  const comm::Communicator& dc_;
  const TuckerOptions& opt_;
  const NormScale ns_;
  TuckerResult& res_;
  const int N_, P_;
  kernels::Array<T> ybuf_, recv_, own_;
  detail::TuckerFactors<T> factors_;
  std::vector<kernels::Array<std::int64_t>> pos_dev_;
  std::unique_ptr<BlacsGrid> grid_;
  Net net_, dnet_;  // dnet_: sums of backend-memory buffers (NCCL on GPUs)
  detail::DenseStage<T> dense_;
  double t_ttmc_ = 0, t_comm_ = 0, t_svd_ = 0;  // of the current iteration (or the init)
  double overlap_sum_ = 0;
  int overlap_count_ = 0;
  std::vector<T> yhost_;         // --svd scalapack on a device backend: Y copied to the host
  std::vector<double> core_;     // cs G (the model's core is G)
  bool core_on_device_ = false;  // the last core is in dense_.core_data(), not in core_
  double fit_old_ = 0;
};

std::vector<std::int64_t> owned_lengths(const std::vector<ModePlan>& plan, bool block) {
  std::vector<std::int64_t> v;
  for (const auto& mp : plan) v.push_back(block ? mp.b : mp.len);
  return v;
}

template <typename T>
Hooi<T>::Hooi(const partition::Distribution& dist, std::unique_ptr<kernels::TensorHandle<T>> X,
              std::vector<ModePlan> plan, kernels::Backend<T>& be, const comm::Communicator& c,
              const comm::Communicator& dc, const TuckerOptions& opt, const NormScale& ns,
              TuckerResult& res)
    : dist_(dist),
      X_(std::move(X)),
      plan_(std::move(plan)),
      be_(be),
      c_(c),
      dc_(dc),
      opt_(opt),
      ns_(ns),
      res_(res),
      N_(static_cast<int>(dist.dims.size())),
      P_(c.size()),
      factors_(be, c, dc, dist.dims, opt.ranks, owned_lengths(plan_, false),
               owned_lengths(plan_, true)),
      net_{c},
      dnet_{dc},
      dense_(be, net_, dnet_) {
  std::int64_t max_out = 0, max_recv = 0, max_own = 0;
  for (const auto& mp : plan_) {
    max_out = std::max(max_out, static_cast<std::int64_t>(mp.local.size()) * mp.cols);
    if (P_ > 1) {
      max_recv = std::max(max_recv, mp.recv_total * mp.cols);
      max_own = std::max(max_own, static_cast<std::int64_t>(mp.own_pos.size()) * mp.cols);
    }
  }
  ybuf_ = be.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_out, 1)));
  // Rows received from other ranks and their sums on the owner, in backend memory (the
  // exchange runs on the data communicator: NCCL between GPUs).
  if (P_ > 1) {
    recv_ = be.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_recv, 1)));
    own_ = be.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_own, 1)));
  }
  // Row maps of the combined rows in backend memory (none where they are the identity).
  pos_dev_.resize(static_cast<std::size_t>(N_));
  for (int n = 0; n < N_; ++n) {
    const auto& mp = plan_[static_cast<std::size_t>(n)];
    if (static_cast<std::int64_t>(mp.own_pos.size()) != mp.len)
      pos_dev_[static_cast<std::size_t>(n)] = be.upload_index(mp.own_pos.data(), mp.own_pos.size());
  }
  if (opt.svd == SvdMethod::scalapack) grid_ = std::make_unique<BlacsGrid>(c);
  res.dense_method = detail::dense_method(opt.svd, be.memory_space());
  if (opt.print_iterations) log::info("dense stage: " + res.dense_method);
}

template <typename T>
RandomFill Hooi<T>::random_fill(int n, std::uint64_t salt) const {
  return [this, n, salt](double* Z, int first, int ncols) {
    const auto& mp = plan_[static_cast<std::size_t>(n)];
    for (std::int64_t i = 0; i < mp.len; ++i) {
      const std::uint64_t orig = dist_.original_index(n, static_cast<std::uint64_t>(mp.lo + i));
      for (int j = 0; j < ncols; ++j)
        Z[static_cast<std::size_t>(i * ncols + j)] =
            tucker_initial_value(opt_.seed + salt, n, orig, first + j);
    }
  };
}

template <typename T>
const T* Hooi<T>::ttmc_combined(int n) {
  const auto& mp = plan_[static_cast<std::size_t>(n)];
  std::vector<const T*> fptr(static_cast<std::size_t>(N_));
  for (int m = 0; m < N_; ++m)
    fptr[static_cast<std::size_t>(m)] = m == n ? nullptr : factors_.backend(m);
  Timer t;
  be_.ttmc(*X_, n, fptr, opt_.ranks, ybuf_.data());
  if (ns_.cs != 1.0) {
    const std::vector<double> up(static_cast<std::size_t>(mp.cols), ns_.cs);
    be_.scale_columns(ybuf_.data(), static_cast<std::int64_t>(mp.local.size()),
                      static_cast<int>(mp.cols), up.data());
  }
  be_.synchronize();
  t_ttmc_ += t.seconds();
  if (res_.tier > 1) {
    res_.stream_copy_seconds += X_->last_copy_seconds();
    res_.stream_compute_seconds += X_->last_compute_seconds();
    overlap_sum_ += X_->overlap_fraction();
    ++overlap_count_;
  }
  if (P_ == 1) return ybuf_.data();
  t.reset();
  const auto P = static_cast<std::size_t>(P_);
  std::vector<std::int64_t> sc(P), sd(P), rc(P), rd(P);
  for (std::size_t p = 0; p < P; ++p) {
    sc[p] = mp.send_rows[p] * mp.cols;
    rc[p] = mp.recv_rows[p] * mp.cols;
    if (p > 0) {
      sd[p] = sd[p - 1] + sc[p - 1];
      rd[p] = rd[p - 1] + rc[p - 1];
    }
  }
  dc_.alltoallv_raw(ybuf_.data(), sc.data(), sd.data(), recv_.data(), rc.data(), rd.data(),
                    comm::data_type_of<T>());
  // Duplicates summed in a fixed order (stable by source rank): the same on every run.
  be_.sum_rows(recv_.data(), mp.src_ptr, mp.src_row, mp.cols, own_.data());
  be_.synchronize();
  t_comm_ += t.seconds();
  return own_.data();
}

template <typename T>
RowsView Hooi<T>::view_of(int n) const {
  const auto& mp = plan_[static_cast<std::size_t>(n)];
  RowsView v;
  v.rows = static_cast<std::int64_t>(mp.own_pos.size());
  v.C = mp.cols;
  v.pos = mp.own_pos.data();
  v.pos_dev = pos_dev_[static_cast<std::size_t>(n)].data();
  v.own_len = mp.len;
  return v;
}

template <typename T>
void Hooi<T>::factor_update(int n, const T* Y) {
  const int R = opt_.ranks[static_cast<std::size_t>(n)];
  const RowsView v = view_of(n);
  auto& U = factors_.owned(n);
  const RandomFill rnd = random_fill(n, 0x5EED0000ull);
  Timer t;
  const double net0 = net_.seconds + dnet_.seconds;
  int added = 0;
  switch (opt_.svd) {
    case SvdMethod::gram:
      added = dense_.update_gram(Y, v, R, U.data(), rnd);
      break;
    case SvdMethod::subspace:
      added = dense_.update_subspace(Y, v, R, U, opt_.subspace_steps, opt_.subspace_tol, rnd);
      break;
    case SvdMethod::scalapack: {
      const T* Yh = Y;
      if (be_.memory_space() != comm::MemorySpace::host) {
        yhost_.resize(static_cast<std::size_t>(v.rows * v.C));
        be_.download(Y, yhost_.size(), yhost_.data());
        Yh = yhost_.data();
      }
      std::vector<double> Uh;
      update_scalapack(Yh, v, R, Uh, net_, *grid_);
      factors_.set_owned(n, Uh);
      Timer to;
      added = dense_.orthonormalize(U.data(), v.own_len, R, rnd);
      dense_.times.orth += to.seconds();
      break;
    }
  }
  const double in_net = net_.seconds + dnet_.seconds - net0;
  t_svd_ += t.seconds() - in_net;
  t_comm_ += in_net;
  res_.completed_columns += added;
}

template <typename T>
void Hooi<T>::init() {
  Timer init_timer;
  for (int n = 0; n < N_ && !opt_.resume; ++n) {
    const int R = opt_.ranks[static_cast<std::size_t>(n)];
    const std::int64_t len = plan_[static_cast<std::size_t>(n)].len;
    std::vector<double> U0(static_cast<std::size_t>(len) * static_cast<std::size_t>(R));
    random_fill(n, 0)(U0.data(), 0, R);
    factors_.set_owned(n, U0);
    res_.completed_columns +=
        dense_.orthonormalize(factors_.owned(n).data(), len, R, random_fill(n, 0x5EED0000ull));
    publish(n);
  }
  if (opt_.init == TuckerInit::hosvd && !opt_.resume) {
    // Every mode from the random factors of the others (Jacobi order), then publish all.
    for (int n = 0; n < N_; ++n) factor_update(n, ttmc_combined(n));
    for (int n = 0; n < N_; ++n) publish(n);
  }
  if (opt_.resume) {  // checkpoint restart: the saved factors replace the initialisation
    detail::check_tucker_state(*opt_.resume, dist_.dims, opt_.ranks);
    for (int n = 0; n < N_; ++n) {
      const auto& mp = plan_[static_cast<std::size_t>(n)];
      std::vector<double> U0;
      detail::saved_rows(*opt_.resume, dist_, n, static_cast<std::uint64_t>(mp.lo), mp.len, U0);
      factors_.set_owned(n, U0);
      publish(n);
    }
    detail::resume_record(*opt_.resume, res_, core_, fit_old_);
    if (ns_.cs != 1.0)
      for (double& v : core_) v *= ns_.cs;
  }
  res_.phases.add("init", init_timer.seconds());
  t_ttmc_ = t_comm_ = t_svd_ = 0;
  net_.seconds = dnet_.seconds = 0;
}

template <typename T>
const std::vector<double>& Hooi<T>::host_core() {
  if (core_on_device_) {
    core_.resize(dense_.core_size());
    be_.download_double(dense_.core_data(), core_.size(), core_.data());
    core_on_device_ = false;
  }
  return core_;
}

template <typename T>
std::vector<double> Hooi<T>::unscaled(std::vector<double> g) const {
  if (ns_.cs != 1.0)
    for (double& v : g) v /= ns_.cs;
  return g;
}

template <typename T>
void Hooi<T>::iterate() {
  const auto& ranks = opt_.ranks;
  for (int it = opt_.resume ? opt_.resume->iteration : 0; it < opt_.max_iters && !res_.converged;
       ++it) {
    Timer iter_timer;
    t_ttmc_ = t_comm_ = t_svd_ = 0;
    const detail::DenseTimes dt0 = dense_.times;
    double norm_g2 = 0;
    for (int n = 0; n < N_; ++n) {
      const T* Y = ttmc_combined(n);
      factor_update(n, Y);
      if (n == N_ - 1) {
        // Core G_(N) = U_N^T Y_(N), summed over ranks on the data communicator (NCCL on
        // GPUs) where Y is; only ||G||^2 comes to the host.
        Timer t;
        const double net0 = dnet_.seconds;
        norm_g2 = dense_.core(Y, view_of(n), ranks[static_cast<std::size_t>(n)],
                              factors_.owned(n).data());
        core_on_device_ = true;
        const double in_net = dnet_.seconds - net0;
        t_svd_ += t.seconds() - in_net;
        t_comm_ += in_net;
      }
      publish(n);
    }
    const double fit = 1.0 - std::sqrt(std::max(ns_.norm_x2 - norm_g2, 0.0)) / ns_.norm_cx;
    TESSERA_INPUT_CHECK(std::isfinite(fit),  // from allreduced sums: agreed
                        "Tucker-HOOI: the fit of iteration "
                            << it + 1 << " is not a number (||G||^2 = " << norm_g2
                            << " for ||X|| scaled to " << ns_.norm_cx << "): the core overflowed");
    TuckerIteration rec;
    rec.iter = it + 1;
    rec.fit = fit;
    rec.delta = fit - fit_old_;
    rec.seconds = iter_timer.seconds();
    rec.ttmc = t_ttmc_;
    rec.comm = t_comm_;
    rec.svd = t_svd_;
    rec.core_norm = std::sqrt(norm_g2) / ns_.cs;
    rec.svd_products = dense_.times.prod - dt0.prod;
    rec.svd_eig = dense_.times.eig - dt0.eig;
    rec.svd_orth = dense_.times.orth - dt0.orth;
    rec.svd_core = dense_.times.core - dt0.core;
    record_iteration(rec, res_, opt_.print_iterations);
    const bool done = it > 0 && std::abs(fit - fit_old_) < opt_.tol;
    fit_old_ = fit;
    if ((it + 1) % std::max(opt_.state_every, 1) == 0) {
      // The host factors for the state, gathered when any rank takes it (collective).
      std::int32_t want = opt_.on_iteration ? 1 : 0;
      c_.allreduce(&want, 1, comm::ReduceOp::max);
      if (want) factors_.gather_full();
      if (opt_.on_iteration)
        opt_.on_iteration(detail::tucker_state(it + 1, done, dist_.dims, ranks,
                                               unscaled(host_core()), factors_.full(), res_.history,
                                               dist_));
    }
    if (done) res_.converged = true;
  }
}

template <typename T>
void Hooi<T>::finish() {
  factors_.gather_full();
  res_.model.dims = dist_.dims;
  res_.model.ranks = opt_.ranks;
  res_.model.core = unscaled(host_core());
  for (int n = 0; n < N_; ++n) {
    const int R = opt_.ranks[static_cast<std::size_t>(n)];
    const auto I = static_cast<std::int64_t>(dist_.dims[static_cast<std::size_t>(n)]);
    Matrix<double> F(I, R, 0.0);
    const auto& full = factors_.full()[static_cast<std::size_t>(n)];
    for (std::int64_t i = 0; i < I; ++i) {
      const auto row =
          static_cast<std::int64_t>(dist_.original_index(n, static_cast<std::uint64_t>(i)));
      std::copy(full.begin() + i * R, full.begin() + (i + 1) * R, F.row(row));
    }
    res_.model.factors.push_back(std::move(F));
  }
  if (overlap_count_ > 0) res_.stream_overlap = overlap_sum_ / overlap_count_;
}

/// The HOOI of both tucker_hooi overloads: `block` is this rank's nonzeros (prepared
/// here), or null with `given` the prepared handle.
template <typename T>
TuckerResult tucker_impl(const partition::Distribution& dist, const SparseTensor<T>* block,
                         std::unique_ptr<kernels::TensorHandle<T>> given, kernels::Backend<T>& be,
                         const comm::Communicator& c, const TuckerOptions& opt,
                         const comm::Communicator* data_comm) {
  const auto& dims = dist.dims;
  const int N = static_cast<int>(dims.size());
  TESSERA_EXPECTS(c.memory_space() == comm::MemorySpace::host,
                  "tucker_hooi needs a host communicator");
  const comm::Communicator& dc = data_comm != nullptr ? *data_comm : c;
  TESSERA_EXPECTS(dc.memory_space() == be.memory_space() && dc.size() == c.size(),
                  "tucker_hooi: the data communicator must span the same ranks in the "
                  "backend's memory space");
  TESSERA_EXPECTS((block != nullptr && block->order() == N) ||
                      (block == nullptr && given != nullptr && given->order() == N),
                  "tucker_hooi: a block or a prepared handle of order " << N);
  const std::vector<std::int64_t> cols = check_options(dims, opt);

  // Copies prepared during the run (the block below; a streaming backend's chunks in tier
  // 3) are ordered for TTMc; the caller's workload comes back at the end.
  struct WorkloadScope {
    kernels::Backend<T>& be;
    kernels::Workload was;
    ~WorkloadScope() { be.set_workload(was); }
  } workload_scope{be, be.workload()};
  be.set_workload(kernels::Workload::ttmc);

  TuckerResult res;
  Timer setup_timer;
  const NormScale ns = norm_and_scale<T>(
      block != nullptr ? block->norm_squared() : given->value_norm_squared(),
      [&] { return block != nullptr ? block->norm() : given->value_norm(); }, c, opt, res);

  // ---- local work that may fail on one rank only: agreed before any further collective ----
  std::unique_ptr<kernels::TensorHandle<T>> X;
  std::vector<ModePlan> plan(static_cast<std::size_t>(N));
  comm::run_collectively(c, [&] {
    X = block != nullptr ? be.prepare(*block) : std::move(given);
    for (int n = 0; n < N; ++n) {
      auto& mp = plan[static_cast<std::size_t>(n)];
      mp.cols = cols[static_cast<std::size_t>(n)];
      mp.local = be.ttmc_rows(*X, n);
      mp.scratch_per_col = static_cast<double>(be.ttmc_scratch_bytes(*X, n, opt.ranks)) /
                           static_cast<double>(mp.cols);
    }
  });
  res.tier = X->tier();
  res.tier_description = X->describe();
  log_memory_tier(res.tier, res.tier_description, c, opt.print_iterations);
  plan_combine(plan, dims, c);
  plan_memory(
      plan, dims, cols, sizeof(T),
      [&](std::int64_t C) { return static_cast<double>(be.wide_scratch_bytes(C)); }, c, opt, res);

  Hooi<T> hooi(dist, std::move(X), std::move(plan), be, c, dc, opt, ns, res);
  res.phases.add("setup", setup_timer.seconds());
  hooi.init();
  hooi.iterate();
  hooi.finish();
  return res;
}

}  // namespace

template <typename T>
TuckerResult tucker_hooi(const partition::Distributed<T>& d, kernels::Backend<T>& be,
                         const comm::Communicator& c, const TuckerOptions& opt,
                         const comm::Communicator* data_comm) {
  return tucker_impl<T>(d.dist, &d.block, nullptr, be, c, opt, data_comm);
}

template <typename T>
TuckerResult tucker_hooi(std::unique_ptr<kernels::TensorHandle<T>> X,
                         const std::vector<std::uint64_t>& dims, kernels::Backend<T>& be,
                         const comm::Communicator& c, const TuckerOptions& opt,
                         const comm::Communicator* data_comm) {
  TESSERA_EXPECTS(X != nullptr && X->dims() == dims,
                  "tucker_hooi: a prepared handle with the global dims");
  partition::Distribution dist;
  dist.nranks = c.size();
  dist.rank = c.rank();
  dist.dims = dims;
  dist.grid.assign(dims.size(), 1);
  dist.coords.assign(dims.size(), 0);
  for (auto n : dims) dist.bounds.push_back({0, n});
  return tucker_impl<T>(dist, nullptr, std::move(X), be, c, opt, data_comm);
}

template TuckerResult tucker_hooi<float>(std::unique_ptr<kernels::TensorHandle<float>>,
                                         const std::vector<std::uint64_t>&,
                                         kernels::Backend<float>&, const comm::Communicator&,
                                         const TuckerOptions&, const comm::Communicator*);
template TuckerResult tucker_hooi<double>(std::unique_ptr<kernels::TensorHandle<double>>,
                                          const std::vector<std::uint64_t>&,
                                          kernels::Backend<double>&, const comm::Communicator&,
                                          const TuckerOptions&, const comm::Communicator*);
template TuckerResult tucker_hooi<float>(const partition::Distributed<float>&,
                                         kernels::Backend<float>&, const comm::Communicator&,
                                         const TuckerOptions&, const comm::Communicator*);
template TuckerResult tucker_hooi<double>(const partition::Distributed<double>&,
                                          kernels::Backend<double>&, const comm::Communicator&,
                                          const TuckerOptions&, const comm::Communicator*);

}  // namespace tessera::algo

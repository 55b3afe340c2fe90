#include "algo/tucker.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <type_traits>

#include "algo/tucker_resume.hpp"
#include "comm/mpi_communicator.hpp"
#include "kernels/row_chunks.hpp"
#include "kernels/ttmc.hpp"
#include "linalg/blas.hpp"
#include "linalg/dense.hpp"
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

constexpr std::int64_t kChunkRows = 2048;  ///< rows per dense product (float: converted)
/// Columns whose squared singular value is below this fraction of the largest are taken
/// as not determined by the data (sigma ratio 1e-11, far above double rounding of the
/// Gram's ~1e-16 relative floor, squared).
constexpr double kRankTolSq = 1e-22;
/// Largest deviation of U^T U from the identity for which one CholeskyQR pass suffices.
constexpr double kOrthSkip = 1e-8;

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

/// Collectives of the dense stages, timed into the comm share.
struct Net {
  const comm::Communicator& c;
  double seconds = 0;
  void sum(double* p, std::size_t n) {
    if (c.size() == 1 || n == 0) return;
    Timer t;
    c.allreduce(p, n);
    seconds += t.seconds();
  }
};

/// The wide products of Y (rows x C, backend memory) with host operands, through the
/// backend (cuBLAS in double on GPUs, BLAS on the host): small operands go to backend
/// memory, results come back to the host; sums over ranks run on the data communicator
/// (NCCL for device backends) before the copy back.
template <typename T>
struct Wide {
  Wide(kernels::Backend<T>& backend, Net& data_net) : be(backend), dnet(data_net) {}
  kernels::Backend<T>& be;
  Net& dnet;  ///< sums over ranks of backend-memory buffers
  kernels::Array<double> a, b;
  /// Seconds (this rank) in the wide products with their transfers, in the host
  /// eigen-solves of the Gram method, and in the orthonormalisations: the parts of the
  /// factor-update time, printed with -v.
  double prod = 0, eig = 0, orth = 0;

  double* ensure(kernels::Array<double>& x, std::size_t n) {
    if (x.size() < n) x = be.allocate_double(std::max<std::size_t>(n, 1));
    return x.data();
  }
  /// w_host (R, descending) and the unit eigenvectors V (C x R, kept in backend memory
  /// for times_top) of the R largest eigenvalues of sum over ranks of Y^T Y. The
  /// eigen-solve runs where the Gram is (cuSOLVER on GPUs, LAPACK on the host).
  kernels::Array<double> v;
  void gram_eig(const T* Y, std::int64_t rows, std::int64_t C, int R, double* w_host) {
    Timer t;
    const auto n = static_cast<std::size_t>(C * C);
    double* S = ensure(a, n);
    be.wide_gram(Y, rows, C, S);
    const double n0 = dnet.seconds;
    dnet.sum(S, n);
    be.synchronize();
    prod += t.seconds() - (dnet.seconds - n0);
    t.reset();
    be.symmetric_eig_top(S, static_cast<int>(C), R, w_host,
                         ensure(v, static_cast<std::size_t>(C) * R));
    eig += t.seconds();
  }
  /// Z_host (rows x R) = Y V for the eigenvectors V of the last gram_eig.
  void times_top(const T* Y, std::int64_t rows, std::int64_t C, int R, double* Z_host) {
    if (rows == 0) return;
    Timer t;
    double* Z = ensure(b, static_cast<std::size_t>(rows) * R);
    be.wide_times(Y, rows, C, v.data(), R, Z);
    be.download_double(Z, static_cast<std::size_t>(rows) * R, Z_host);
    prod += t.seconds();
  }
  /// Z_host (rows x R) = Y W_host (this rank's rows).
  void times(const T* Y, std::int64_t rows, std::int64_t C, const double* W_host, int R,
             double* Z_host) {
    if (rows == 0) return;
    Timer t;
    double* W = ensure(a, static_cast<std::size_t>(C) * R);
    be.upload_double(W_host, static_cast<std::size_t>(C) * R, W);
    double* Z = ensure(b, static_cast<std::size_t>(rows) * R);
    be.wide_times(Y, rows, C, W, R, Z);
    be.download_double(Z, static_cast<std::size_t>(rows) * R, Z_host);
    prod += t.seconds();
  }
  /// B_host (C x R) = sum over ranks of Y^T P_host.
  void times_t_sum(const T* Y, std::int64_t rows, std::int64_t C, const double* P_host, int R,
                   double* B_host) {
    Timer t;
    double* P = ensure(a, static_cast<std::size_t>(std::max<std::int64_t>(rows, 1)) * R);
    be.upload_double(P_host, static_cast<std::size_t>(rows) * R, P);
    const auto n = static_cast<std::size_t>(C) * R;
    double* B = ensure(b, n);
    be.wide_times_t(Y, rows, C, P, R, B);
    const double n0 = dnet.seconds;
    dnet.sum(B, n);
    be.download_double(B, n, B_host);
    prod += t.seconds() - (dnet.seconds - n0);
  }
};

/// Fills columns [first, first + ncols) of a rows x ncols block (row stride ncols) with
/// keyed random values (rows are this rank's owned rows).
using RandomFill = std::function<void(double* Z, int first, int ncols)>;

/// G (R x R) = U^T U summed over ranks.
void gram_all(const double* U, std::int64_t rows, int R, double* G, Net& net) {
  std::fill(G, G + static_cast<std::size_t>(R) * R, 0.0);
  for (std::int64_t r0 = 0; r0 < rows; r0 += kChunkRows * 8) {
    const std::int64_t nr = std::min(kChunkRows * 8, rows - r0);
    linalg::syrk_lower(R, nr, 1.0, U + r0 * R, R, 1.0, G);
  }
  linalg::symmetrize_lower(R, G);
  net.sum(G, static_cast<std::size_t>(R) * R);
}

/// U (rows x R) := U * M for M (R x R).
void times_small(double* U, std::int64_t rows, int R, const double* M, std::vector<double>& tmp) {
  tmp.resize(static_cast<std::size_t>(rows) * R);
  for (std::int64_t r0 = 0; r0 < rows; r0 += kChunkRows * 8) {
    const std::int64_t nr = std::min(kChunkRows * 8, rows - r0);
    linalg::gemm(false, false, nr, R, R, 1.0, U + r0 * R, R, M, R, 0.0, tmp.data() + r0 * R, R);
  }
  std::copy(tmp.begin(), tmp.end(), U);
}

/// Cholesky of G (R x R) into L (lower, row-major) and M = L^{-T}; false when G is not
/// numerically positive definite (pivot ratio under what CholeskyQR tolerates).
bool cholesky_inverse_t(const double* G, int R, std::vector<double>& M) {
  std::vector<double> L(G, G + static_cast<std::size_t>(R) * R);
  if (!linalg::cholesky(L.data(), R)) return false;
  double dmin = std::numeric_limits<double>::infinity(), dmax = 0;
  for (int i = 0; i < R; ++i) {
    const double d = L[static_cast<std::size_t>(i) * R + i];
    if (!(d > 0) || !std::isfinite(d)) return false;
    dmin = std::min(dmin, d);
    dmax = std::max(dmax, d);
  }
  if (dmin * dmin < 1e-13 * dmax * dmax) return false;
  // Linv (lower) by forward substitution, then M = Linv^T (upper).
  std::vector<double> Li(static_cast<std::size_t>(R) * R, 0.0);
  for (int j = 0; j < R; ++j) {
    for (int i = j; i < R; ++i) {
      double s = i == j ? 1.0 : 0.0;
      for (int k = j; k < i; ++k)
        s -= L[static_cast<std::size_t>(i) * R + k] * Li[static_cast<std::size_t>(k) * R + j];
      Li[static_cast<std::size_t>(i) * R + j] = s / L[static_cast<std::size_t>(i) * R + i];
    }
  }
  M.assign(static_cast<std::size_t>(R) * R, 0.0);
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < R; ++j)
      M[static_cast<std::size_t>(i) * R + j] = Li[static_cast<std::size_t>(j) * R + i];
  return true;
}

int orthonormalize(double* U, std::int64_t rows, int R, Net& net, const RandomFill& rnd,
                   int col_offset = 0, int depth = 0);

/// The eigen-based path of orthonormalize for a numerically singular Gram G of U: an
/// orthonormal basis of U's well-determined span, completed by random directions.
int orthonormalize_singular(double* U, std::int64_t rows, int R, const std::vector<double>& G,
                            Net& net, const RandomFill& rnd, int col_offset, int depth) {
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
  std::vector<double> W(static_cast<std::size_t>(R) * R, 0.0), tmp;
  for (int j = 0; j < good; ++j) {
    const int src = R - 1 - j;
    const double s = 1.0 / std::sqrt(w[static_cast<std::size_t>(src)]);
    for (int i = 0; i < R; ++i)
      W[static_cast<std::size_t>(i) * R + j] = Q[static_cast<std::size_t>(i) * R + src] * s;
  }
  times_small(U, rows, R, W.data(), tmp);  // columns >= good are now 0
  int added = 0;
  if (good > 0) {
    // Clean the good columns with one CholeskyQR pass (they are nearly orthonormal).
    std::vector<double> Ug(static_cast<std::size_t>(rows) * good);
    for (std::int64_t i = 0; i < rows; ++i)
      std::copy(U + i * R, U + i * R + good, Ug.data() + i * good);
    added += orthonormalize(Ug.data(), rows, good, net, rnd, col_offset, depth + 1);
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
      net.sum(M.data(), M.size());
      linalg::gemm(false, false, rows, miss, good, -1.0, Ug.data(), good, M.data(), miss, 1.0,
                   Z.data(), miss);
    }
    added += miss + orthonormalize(Z.data(), rows, miss, net, rnd, col_offset + good, depth + 1);
    for (std::int64_t i = 0; i < rows; ++i)
      std::copy(Z.data() + i * miss, Z.data() + (i + 1) * miss, U + i * R + good);
  }
  return added;
}

/// Orthonormalises the columns of the row-distributed U (rows x R: this rank's rows) over
/// all ranks by CholeskyQR2 (column order and span kept). When the Gram is numerically
/// singular, U becomes an orthonormal basis of its well-determined span completed by
/// keyed random directions. Returns the number of random directions added.
int orthonormalize(double* U, std::int64_t rows, int R, Net& net, const RandomFill& rnd,
                   int col_offset, int depth) {
  if (R == 0) return 0;
  std::vector<double> G(static_cast<std::size_t>(R) * R), M, tmp;
  for (int pass = 0; pass < 2; ++pass) {
    gram_all(U, rows, R, G.data(), net);
    // Already orthonormal to within kOrthSkip (the usual case for Y V / sigma of the
    // Gram method and for power steps near convergence): one CholeskyQR pass leaves an
    // error of order kOrthSkip^2 + rounding, so the second pass is skipped.
    double dev = 0;
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < R; ++j)
        dev =
            std::max(dev, std::abs(G[static_cast<std::size_t>(i) * R + j] - (i == j ? 1.0 : 0.0)));
    if (!cholesky_inverse_t(G.data(), R, M))
      return orthonormalize_singular(U, rows, R, G, net, rnd, col_offset, depth);
    times_small(U, rows, R, M.data(), tmp);
    if (pass == 0 && dev < kOrthSkip) break;
  }
  return 0;
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

/// Everything one mode's factor update needs about the combined rows of Y_(n) on this rank.
struct RowsView {
  std::int64_t rows = 0;              ///< combined rows held (present rows of the owned range)
  std::int64_t C = 0;                 ///< columns
  const std::int64_t* pos = nullptr;  ///< row j is owned-range row pos[j]
  std::int64_t own_len = 0;           ///< rows of the owned range
};

/// Gathers the present rows of U (own_len x R) into P (rows x R).
void gather_present(const RowsView& v, const double* U, int R, std::vector<double>& P) {
  P.resize(static_cast<std::size_t>(v.rows) * R);
  for (std::int64_t j = 0; j < v.rows; ++j)
    std::copy(U + v.pos[j] * R, U + (v.pos[j] + 1) * R, P.data() + j * R);
}

/// U (own_len x R) := 0 except the present rows, taken from Z (rows x R).
void scatter_present(const RowsView& v, const double* Z, int R, double* U) {
  std::fill(U, U + v.own_len * R, 0.0);
  for (std::int64_t j = 0; j < v.rows; ++j) std::copy(Z + j * R, Z + (j + 1) * R, U + v.pos[j] * R);
}

template <typename T>
int update_gram(const T* Y, const RowsView& v, int R, double* U, Net& net, Wide<T>& wide,
                const RandomFill& rnd) {
  const std::int64_t C = v.C;
  std::vector<double> w(static_cast<std::size_t>(R)), sc(static_cast<std::size_t>(R));
  wide.gram_eig(Y, v.rows, C, R, w.data());
  for (int j = 0; j < R; ++j) {
    const double wj = w[static_cast<std::size_t>(j)];
    sc[static_cast<std::size_t>(j)] =
        (w[0] > 0 && std::isfinite(w[0]) && wj > w[0] * kRankTolSq) ? 1.0 / std::sqrt(wj) : 0.0;
  }
  // U = Y V / sigma (columns scaled after the product).
  std::vector<double> Z(static_cast<std::size_t>(v.rows) * R);
  wide.times_top(Y, v.rows, C, R, Z.data());
  for (std::int64_t i = 0; i < v.rows; ++i)
    for (int j = 0; j < R; ++j)
      Z[static_cast<std::size_t>(i * R + j)] *= sc[static_cast<std::size_t>(j)];
  scatter_present(v, Z.data(), R, U);
  // Y V / sigma is orthonormal up to rounding amplified by the Gram's condition; CholeskyQR2
  // restores it (and completes columns no data determines).
  Timer to;
  const int added = orthonormalize(U, v.own_len, R, net, rnd);
  wide.orth += to.seconds();
  return added;
}

template <typename T>
int update_subspace(const T* Y, const RowsView& v, int R, double* U, int steps, double tol,
                    Net& net, Wide<T>& wide, const RandomFill& rnd) {
  const std::int64_t C = v.C;
  int added = 0;
  std::vector<double> P, B(static_cast<std::size_t>(C) * R),
      Z(static_cast<std::size_t>(v.rows) * R);
  std::vector<double> Unew(static_cast<std::size_t>(v.own_len) * R),
      M(static_cast<std::size_t>(R) * R);
  std::vector<double> proj, tmp;
  gather_present(v, U, R, P);
  for (int s = 0; s < steps; ++s) {
    wide.times_t_sum(Y, v.rows, C, P.data(), R, B.data());
    wide.times(Y, v.rows, C, B.data(), R, Z.data());
    scatter_present(v, Z.data(), R, Unew.data());
    Timer to;
    added += orthonormalize(Unew.data(), v.own_len, R, net, rnd);
    wide.orth += to.seconds();
    // Change of the subspace: || Unew - U (U^T Unew) ||_F (no cancellation, unlike angles).
    linalg::gemm(true, false, R, R, v.own_len, 1.0, U, R, Unew.data(), R, 0.0, M.data(), R);
    net.sum(M.data(), M.size());
    proj.assign(U, U + v.own_len * R);
    times_small(proj.data(), v.own_len, R, M.data(), tmp);
    double change = 0;
    for (std::size_t k = 0; k < proj.size(); ++k)
      change += (Unew[k] - proj[k]) * (Unew[k] - proj[k]);
    net.sum(&change, 1);
    std::copy(Unew.begin(), Unew.end(), U);
    gather_present(v, U, R, P);
    if (std::sqrt(change) < tol) break;
  }
  // Rayleigh-Ritz: rotate the basis to the singular vectors' order (B^T B = U^T Y Y^T U).
  wide.times_t_sum(Y, v.rows, C, P.data(), R, B.data());
  std::vector<double> H(static_cast<std::size_t>(R) * R), w(static_cast<std::size_t>(R)),
      Q(static_cast<std::size_t>(R) * R), Qd(static_cast<std::size_t>(R) * R);
  linalg::gemm(true, false, R, R, C, 1.0, B.data(), R, B.data(), R, 0.0, H.data(), R);
  linalg::symmetrize_lower(R, H.data());
  linalg::symmetric_eig(H.data(), R, w.data(), Q.data());
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < R; ++j)
      Qd[static_cast<std::size_t>(i) * R + j] = Q[static_cast<std::size_t>(i) * R + (R - 1 - j)];
  times_small(U, v.own_len, R, Qd.data(), tmp);
  return added;
}

template <typename T>
int update_scalapack(const T* Y, const RowsView& v, int R, double* U, Net& net,
                     const RandomFill& rnd, const BlacsGrid& grid) {
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
  scatter_present(v, Z.data(), R, U);
  return orthonormalize(U, v.own_len, R, net, rnd);
#else
  (void)Y, (void)v, (void)R, (void)U, (void)net, (void)rnd, (void)grid;
  TESSERA_INPUT_CHECK(false, "--svd scalapack: this tessera was built without ScaLAPACK");
  return 0;
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

/// The HOOI of both tucker_hooi overloads: `block` is this rank's nonzeros (prepared
/// here), or null with `given` the prepared handle.
template <typename T>
TuckerResult tucker_impl(const partition::Distribution& dist, const SparseTensor<T>* block,
                         std::unique_ptr<kernels::TensorHandle<T>> given, kernels::Backend<T>& be,
                         const comm::Communicator& c, const TuckerOptions& opt,
                         const comm::Communicator* data_comm) {
  const auto& dims = dist.dims;
  const int N = static_cast<int>(dims.size());
  const int P = c.size();
  const std::vector<int> ranks = opt.ranks;
  TESSERA_EXPECTS(c.memory_space() == comm::MemorySpace::host,
                  "tucker_hooi needs a host communicator");
  const comm::Communicator& dc = data_comm != nullptr ? *data_comm : c;
  TESSERA_EXPECTS(dc.memory_space() == be.memory_space() && dc.size() == P,
                  "tucker_hooi: the data communicator must span the same ranks in the "
                  "backend's memory space");
  const bool on_host = be.memory_space() == comm::MemorySpace::host;
  TESSERA_EXPECTS((block != nullptr && block->order() == N) ||
                      (block == nullptr && given != nullptr && given->order() == N),
                  "tucker_hooi: a block or a prepared handle of order " << N);

  // ---- options: every rank sees the same, so every rank throws the same InputError ----
  check_tucker_ranks(dims, ranks);
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
    cols[static_cast<std::size_t>(n)] = kernels::ttmc_output_cols(ranks, n);
    TESSERA_INPUT_CHECK(opt.svd != SvdMethod::gram || cols[static_cast<std::size_t>(n)] <= 4096,
                        "--svd gram: mode " << n << " needs a " << cols[static_cast<std::size_t>(n)]
                                            << " x " << cols[static_cast<std::size_t>(n)]
                                            << " Gram matrix (the product of the other modes' "
                                               "ranks); use --svd subspace or smaller ranks");
  }

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
  // ||X||: the plain sum of squares while it is far from the ends of the double range
  // (results as ever), else scaled norms (values near 1e200 or 1e-200), as CP-ALS does.
  double norm_x2 = block != nullptr ? block->norm_squared() : given->value_norm_squared();
  c.allreduce(&norm_x2, 1);
  const bool plain_norm = std::isfinite(norm_x2) && norm_x2 >= 0x1p-1000 && norm_x2 <= 0x1p+1000;
  if (!plain_norm) {
    double mine = block != nullptr ? block->norm() : given->value_norm(), mx = mine;
    c.allreduce(&mx, 1, comm::ReduceOp::max);
    double r = mx > 0 && std::isfinite(mx) ? (mine / mx) * (mine / mx) : 0.0;
    c.allreduce(&r, 1);
    res.norm_x = mx > 0 && std::isfinite(mx) ? mx * std::sqrt(r) : mx;
  } else {
    res.norm_x = std::sqrt(norm_x2);
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
  const double cs =
      norm_exp >= lo_exp && norm_exp <= hi_exp
          ? 1.0
          : std::ldexp(1.0, -std::clamp(norm_exp, std::is_same_v<T, float> ? -100 : -1000,
                                        std::is_same_v<T, float> ? 100 : 1000));
  if (cs != 1.0 || !plain_norm) norm_x2 = (cs * res.norm_x) * (cs * res.norm_x);
  const double norm_cx = cs * res.norm_x;

  // ---- local work that may fail on one rank only: agreed before any further collective ----
  std::unique_ptr<kernels::TensorHandle<T>> X;
  std::vector<ModePlan> plan(static_cast<std::size_t>(N));
  comm::run_collectively(c, [&] {
    X = block != nullptr ? be.prepare(*block) : std::move(given);
    for (int n = 0; n < N; ++n) {
      auto& mp = plan[static_cast<std::size_t>(n)];
      mp.cols = cols[static_cast<std::size_t>(n)];
      mp.local = be.ttmc_rows(*X, n);
      mp.scratch_per_col =
          static_cast<double>(be.ttmc_scratch_bytes(*X, n, ranks)) / static_cast<double>(mp.cols);
    }
  });

  res.tier = X->tier();
  res.tier_description = X->describe();
  {
    std::int32_t tier_max = res.tier;
    c.allreduce(&tier_max, 1, comm::ReduceOp::max);
    if (opt.print_iterations)
      log::info("memory tier (rank 0): " + res.tier_description +
                (tier_max != res.tier
                     ? " (some ranks stream: tier " + std::to_string(tier_max) + ")"
                     : ""));
  }
  double overlap_sum = 0;
  int overlap_count = 0;

  // ---- row ownership and the combine plan (index exchange, once) ----
  for (int n = 0; n < N; ++n) {
    auto& mp = plan[static_cast<std::size_t>(n)];
    const auto I = static_cast<std::int64_t>(dims[static_cast<std::size_t>(n)]);
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

  // ---- memory plan: every rank evaluates the same estimate from all ranks' counts ----
  const std::size_t vsize = sizeof(T);
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
      const Estimate e = estimate_rank(rc, dims, r, vsize, P, opt.svd, [&](std::int64_t C) {
        return static_cast<double>(be.wide_scratch_bytes(C));
      });
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

  // ---- buffers ----
  std::int64_t max_out = 0, max_recv = 0, max_own = 0;
  for (const auto& mp : plan) {
    max_out = std::max(max_out, static_cast<std::int64_t>(mp.local.size()) * mp.cols);
    if (P > 1) {
      max_recv = std::max(max_recv, mp.recv_total * mp.cols);
      max_own = std::max(max_own, static_cast<std::int64_t>(mp.own_pos.size()) * mp.cols);
    }
  }
  auto ybuf = be.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_out, 1)));
  // Rows received from other ranks and their sums on the owner, in backend memory (the
  // exchange runs on the data communicator: NCCL between GPUs).
  kernels::Array<T> recv, own;
  if (P > 1) {
    recv = be.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_recv, 1)));
    own = be.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_own, 1)));
  }
  std::vector<kernels::Array<T>> A(static_cast<std::size_t>(N));
  std::vector<std::vector<double>> Uown(static_cast<std::size_t>(N)),
      Ufull(static_cast<std::size_t>(N));
  for (int n = 0; n < N; ++n) {
    const auto I = static_cast<std::size_t>(dims[static_cast<std::size_t>(n)]);
    const auto R = static_cast<std::size_t>(ranks[static_cast<std::size_t>(n)]);
    A[static_cast<std::size_t>(n)] = be.allocate(I * R);
    Uown[static_cast<std::size_t>(n)].assign(
        static_cast<std::size_t>(plan[static_cast<std::size_t>(n)].len) * R, 0.0);
  }
  std::unique_ptr<BlacsGrid> grid;
  if (opt.svd == SvdMethod::scalapack) grid = std::make_unique<BlacsGrid>(c);
  res.phases.add("setup", setup_timer.seconds());

  Net net{c};
  Net dnet{dc};  // sums of backend-memory buffers (NCCL on GPUs)
  Wide<T> wide(be, dnet);
  double t_ttmc = 0, t_comm = 0, t_svd = 0;  // of the current iteration (or the init)
  std::vector<T> yhost;  // --svd scalapack on a device backend: Y copied to the host

  // Keyed random values for the owned rows of mode n (salt separates init and completion).
  auto random_fill = [&](int n, std::uint64_t salt) -> RandomFill {
    return [&, n, salt](double* Z, int first, int ncols) {
      const auto& mp = plan[static_cast<std::size_t>(n)];
      for (std::int64_t i = 0; i < mp.len; ++i) {
        const std::uint64_t orig = dist.original_index(n, static_cast<std::uint64_t>(mp.lo + i));
        for (int j = 0; j < ncols; ++j)
          Z[static_cast<std::size_t>(i * ncols + j)] =
              tucker_initial_value(opt.seed + salt, n, orig, first + j);
      }
    };
  };

  // On GPUs (backend and data communicator in device memory) a new factor goes to the
  // backend by an allgather of the owned rows in T over the data communicator (NCCL), and
  // the host copies in double (Ufull: checkpoints, the model) are gathered only when
  // needed. Same values as gathering in double and converting: the conversion is per
  // element.
  const bool device_publish = P > 1 && dc.memory_space() == comm::MemorySpace::device &&
                              be.memory_space() == comm::MemorySpace::device;
  std::vector<char> full_stale(static_cast<std::size_t>(N), 0);
  kernels::Array<T> pub_send, pub_recv;
  if (device_publish) {
    std::int64_t most = 1;
    for (int n = 0; n < N; ++n)
      most =
          std::max(most, plan[static_cast<std::size_t>(n)].b * ranks[static_cast<std::size_t>(n)]);
    pub_send = be.allocate(static_cast<std::size_t>(most));
    pub_recv = be.allocate(static_cast<std::size_t>(most) * static_cast<std::size_t>(P));
  }
  // Ufull[n], every rank's host copy in double, from the owners' rows (collective).
  auto gather_host = [&](int n) {
    const auto& mp = plan[static_cast<std::size_t>(n)];
    const int R = ranks[static_cast<std::size_t>(n)];
    const auto I = static_cast<std::int64_t>(dims[static_cast<std::size_t>(n)]);
    auto& full = Ufull[static_cast<std::size_t>(n)];
    if (P == 1) {
      full = Uown[static_cast<std::size_t>(n)];
      return;
    }
    std::vector<double> send(static_cast<std::size_t>(mp.b * R), 0.0);
    std::copy(Uown[static_cast<std::size_t>(n)].begin(), Uown[static_cast<std::size_t>(n)].end(),
              send.begin());
    full.assign(static_cast<std::size_t>(mp.b * R * P), 0.0);
    c.allgather(send.data(), full.data(), send.size());
    full.resize(static_cast<std::size_t>(I * R));
  };
  // Every stale Ufull[n] gathered (collective).
  auto gather_full = [&]() {
    for (int n = 0; n < N; ++n) {
      if (!full_stale[static_cast<std::size_t>(n)]) continue;
      gather_host(n);
      full_stale[static_cast<std::size_t>(n)] = 0;
    }
  };

  // Owned rows -> every rank's full factor (label order) -> backend factor.
  auto publish = [&](int n) {
    const auto& mp = plan[static_cast<std::size_t>(n)];
    const int R = ranks[static_cast<std::size_t>(n)];
    const auto I = static_cast<std::int64_t>(dims[static_cast<std::size_t>(n)]);
    auto& full = Ufull[static_cast<std::size_t>(n)];
    Timer t;
    if (device_publish) {
      const auto& own = Uown[static_cast<std::size_t>(n)];
      std::vector<T> h(static_cast<std::size_t>(mp.b * R), T(0));
      for (std::size_t k = 0; k < own.size(); ++k) h[k] = static_cast<T>(own[k]);
      be.upload(h.data(), h.size(), pub_send.data());
      t_svd += t.seconds();
      t.reset();
      dc.allgather_raw(pub_send.data(), pub_recv.data(), h.size(), comm::data_type_of<T>());
      be.copy(pub_recv.data(), static_cast<std::size_t>(I * R),
              A[static_cast<std::size_t>(n)].data());
      be.synchronize();
      t_comm += t.seconds();
      full_stale[static_cast<std::size_t>(n)] = 1;
      return;
    }
    gather_host(n);
    t_comm += t.seconds();
    t.reset();
    std::vector<T> h(full.begin(), full.end());
    if (!h.empty()) be.upload(h.data(), h.size(), A[static_cast<std::size_t>(n)].data());
    t_svd += t.seconds();
  };

  // TTMc of mode n with the current backend factors, combined on the owners; returns the
  // combined rows (P == 1: the TTMc output itself).
  auto ttmc_combined = [&](int n) -> const T* {
    const auto& mp = plan[static_cast<std::size_t>(n)];
    std::vector<const T*> fptr(static_cast<std::size_t>(N));
    for (int m = 0; m < N; ++m)
      fptr[static_cast<std::size_t>(m)] = m == n ? nullptr : A[static_cast<std::size_t>(m)].data();
    Timer t;
    be.ttmc(*X, n, fptr, ranks, ybuf.data());
    if (cs != 1.0) {
      const std::vector<double> up(static_cast<std::size_t>(mp.cols), cs);
      be.scale_columns(ybuf.data(), static_cast<std::int64_t>(mp.local.size()),
                       static_cast<int>(mp.cols), up.data());
    }
    be.synchronize();
    t_ttmc += t.seconds();
    if (res.tier > 1) {
      res.stream_copy_seconds += X->last_copy_seconds();
      res.stream_compute_seconds += X->last_compute_seconds();
      overlap_sum += X->overlap_fraction();
      ++overlap_count;
    }
    if (P == 1) return ybuf.data();
    t.reset();
    std::vector<std::int64_t> sc(static_cast<std::size_t>(P)), sd(static_cast<std::size_t>(P)),
        rc(static_cast<std::size_t>(P)), rd(static_cast<std::size_t>(P));
    for (int p = 0; p < P; ++p) {
      sc[static_cast<std::size_t>(p)] = mp.send_rows[static_cast<std::size_t>(p)] * mp.cols;
      rc[static_cast<std::size_t>(p)] = mp.recv_rows[static_cast<std::size_t>(p)] * mp.cols;
      if (p > 0) {
        sd[static_cast<std::size_t>(p)] =
            sd[static_cast<std::size_t>(p - 1)] + sc[static_cast<std::size_t>(p - 1)];
        rd[static_cast<std::size_t>(p)] =
            rd[static_cast<std::size_t>(p - 1)] + rc[static_cast<std::size_t>(p - 1)];
      }
    }
    dc.alltoallv_raw(ybuf.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(),
                     comm::data_type_of<T>());
    // Duplicates summed in a fixed order (stable by source rank): the same on every run.
    be.sum_rows(recv.data(), mp.src_ptr, mp.src_row, mp.cols, own.data());
    be.synchronize();
    t_comm += t.seconds();
    return own.data();
  };

  auto view_of = [&](int n) {
    const auto& mp = plan[static_cast<std::size_t>(n)];
    RowsView v;
    v.rows = static_cast<std::int64_t>(mp.own_pos.size());
    v.C = mp.cols;
    v.pos = mp.own_pos.data();
    v.own_len = mp.len;
    return v;
  };

  // New U_n (owned rows, in place) from the combined rows Y.
  auto factor_update = [&](int n, const T* Y) {
    const int R = ranks[static_cast<std::size_t>(n)];
    const RowsView v = view_of(n);
    double* U = Uown[static_cast<std::size_t>(n)].data();
    const RandomFill rnd = random_fill(n, 0x5EED0000ull);
    Timer t;
    const double net0 = net.seconds + dnet.seconds;
    int added = 0;
    switch (opt.svd) {
      case SvdMethod::gram:
        added = update_gram(Y, v, R, U, net, wide, rnd);
        break;
      case SvdMethod::subspace:
        added = update_subspace(Y, v, R, U, opt.subspace_steps, opt.subspace_tol, net, wide, rnd);
        break;
      case SvdMethod::scalapack: {
        const T* Yh = Y;
        if (!on_host) {
          yhost.resize(static_cast<std::size_t>(v.rows * v.C));
          be.download(Y, yhost.size(), yhost.data());
          Yh = yhost.data();
        }
        added = update_scalapack(Yh, v, R, U, net, rnd, *grid);
        break;
      }
    }
    const double in_net = net.seconds + dnet.seconds - net0;
    t_svd += t.seconds() - in_net;
    t_comm += in_net;
    res.completed_columns += added;
  };

  // ---- initial factors ----
  Timer init_timer;
  for (int n = 0; n < N && !opt.resume; ++n) {
    const int R = ranks[static_cast<std::size_t>(n)];
    auto& U = Uown[static_cast<std::size_t>(n)];
    random_fill(n, 0)(U.data(), 0, R);
    res.completed_columns += orthonormalize(U.data(), plan[static_cast<std::size_t>(n)].len, R, net,
                                            random_fill(n, 0x5EED0000ull));
    publish(n);
  }
  if (opt.init == TuckerInit::hosvd && !opt.resume) {
    // Every mode from the random factors of the others (Jacobi order), then publish all.
    for (int n = 0; n < N; ++n) factor_update(n, ttmc_combined(n));
    for (int n = 0; n < N; ++n) publish(n);
  }
  if (opt.resume) {  // checkpoint restart: the saved factors replace the initialisation
    detail::check_tucker_state(*opt.resume, dims, ranks);
    for (int n = 0; n < N; ++n) {
      const auto& mp = plan[static_cast<std::size_t>(n)];
      detail::saved_rows(*opt.resume, dist, n, static_cast<std::uint64_t>(mp.lo), mp.len,
                         Uown[static_cast<std::size_t>(n)]);
      publish(n);
    }
  }
  res.phases.add("init", init_timer.seconds());
  t_ttmc = t_comm = t_svd = 0;
  net.seconds = dnet.seconds = 0;

  // ---- HOOI iterations ----
  std::vector<double> core;
  double fit_old = 0;
  if (opt.resume) detail::resume_record(*opt.resume, res, core, fit_old);
  // `core` holds cs G during the loop (the model's core is G).
  auto unscaled = [&](std::vector<double> g) {
    if (cs != 1.0)
      for (double& v : g) v /= cs;
    return g;
  };
  if (cs != 1.0)
    for (double& v : core) v *= cs;
  std::vector<double> P_rows;
  for (int it = opt.resume ? opt.resume->iteration : 0; it < opt.max_iters && !res.converged;
       ++it) {
    Timer iter_timer;
    t_ttmc = t_comm = t_svd = 0;
    const double prod0 = wide.prod, eig0 = wide.eig, orth0 = wide.orth;
    double norm_g2 = 0;
    for (int n = 0; n < N; ++n) {
      const T* Y = ttmc_combined(n);
      factor_update(n, Y);
      if (n == N - 1) {
        // Core G_(N) = U_N^T Y_(N): B = Y^T U_N (C x R_N) is the core, row-major, last mode
        // fastest.
        Timer t;
        const RowsView v = view_of(n);
        const int R = ranks[static_cast<std::size_t>(n)];
        gather_present(v, Uown[static_cast<std::size_t>(n)].data(), R, P_rows);
        core.assign(static_cast<std::size_t>(v.C) * R, 0.0);
        // Summed over ranks on the data communicator: NCCL on GPUs.
        const double net0 = dnet.seconds;
        wide.times_t_sum(Y, v.rows, v.C, P_rows.data(), R, core.data());
        for (double g : core) norm_g2 += g * g;
        const double in_net = dnet.seconds - net0;
        t_svd += t.seconds() - in_net;
        t_comm += in_net;
      }
      publish(n);
    }
    const double fit = 1.0 - std::sqrt(std::max(norm_x2 - norm_g2, 0.0)) / norm_cx;
    TESSERA_INPUT_CHECK(std::isfinite(fit),  // from allreduced sums: agreed
                        "Tucker-HOOI: the fit of iteration "
                            << it + 1 << " is not a number (||G||^2 = " << norm_g2
                            << " for ||X|| scaled to " << norm_cx << "): the core overflowed");

    TuckerIteration rec;
    rec.iter = it + 1;
    rec.fit = fit;
    rec.delta = fit - fit_old;
    rec.seconds = iter_timer.seconds();
    rec.ttmc = t_ttmc;
    rec.comm = t_comm;
    rec.svd = t_svd;
    rec.core_norm = std::sqrt(norm_g2) / cs;
    rec.svd_products = wide.prod - prod0;
    rec.svd_eig = wide.eig - eig0;
    rec.svd_orth = wide.orth - orth0;
    res.history.push_back(rec);
    res.phases.add("ttmc", t_ttmc);
    res.phases.add("comm", t_comm);
    res.phases.add("svd", t_svd);
    res.fit = fit;
    res.core_norm = rec.core_norm;
    res.iterations = it + 1;
    if (opt.print_iterations) {
      const double tot = std::max(rec.seconds, 1e-12);
      char line[256];
      std::snprintf(line, sizeof(line),
                    "  iter %3d  fit %.6f  delta %+.3e  %.4f s  (ttmc %2.0f%%  comm %2.0f%%  "
                    "svd %2.0f%%)",
                    rec.iter, fit, rec.delta, rec.seconds, 100 * t_ttmc / tot, 100 * t_comm / tot,
                    100 * t_svd / tot);
      log::info(line);
      std::snprintf(line, sizeof(line),
                    "            svd split: products %.4f s, eigen-solves %.4f s, "
                    "orthonormalisation %.4f s, rest %.4f s",
                    rec.svd_products, rec.svd_eig, rec.svd_orth,
                    t_svd - rec.svd_products - rec.svd_eig - rec.svd_orth);
      log::debug(line);
    }
    const bool done = it > 0 && std::abs(fit - fit_old) < opt.tol;
    fit_old = fit;
    if ((it + 1) % std::max(opt.state_every, 1) == 0 && device_publish) {
      // The host factors for the state, gathered when any rank takes it (collective).
      std::int32_t want = opt.on_iteration ? 1 : 0;
      c.allreduce(&want, 1, comm::ReduceOp::max);
      if (want) gather_full();
    }
    if (opt.on_iteration && (it + 1) % std::max(opt.state_every, 1) == 0)
      opt.on_iteration(detail::tucker_state(it + 1, done, dims, ranks, unscaled(core), Ufull,
                                            res.history, dist));
    if (done) {
      res.converged = true;
      break;
    }
  }

  // ---- the model, complete on every rank, rows in original index order ----
  gather_full();
  res.model.dims = dims;
  res.model.ranks = ranks;
  res.model.core = unscaled(core);
  for (int n = 0; n < N; ++n) {
    const int R = ranks[static_cast<std::size_t>(n)];
    const auto I = static_cast<std::int64_t>(dims[static_cast<std::size_t>(n)]);
    Matrix<double> F(I, R, 0.0);
    const auto& full = Ufull[static_cast<std::size_t>(n)];
    for (std::int64_t i = 0; i < I; ++i) {
      const auto row =
          static_cast<std::int64_t>(dist.original_index(n, static_cast<std::uint64_t>(i)));
      std::copy(full.begin() + i * R, full.begin() + (i + 1) * R, F.row(row));
    }
    res.model.factors.push_back(std::move(F));
  }
  if (overlap_count > 0) res.stream_overlap = overlap_sum / overlap_count;
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

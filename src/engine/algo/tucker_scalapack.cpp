// Tucker-HOOI's --svd scalapack factor update (see tucker_scalapack.hpp).
#include "algo/tucker_scalapack.hpp"

#include <algorithm>
#include <cstdint>

#include "kernels/row_chunks.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

#if TESSERA_HAVE_SCALAPACK
#include "comm/mpi_communicator.hpp"

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

namespace tessera::algo::detail {

#if TESSERA_HAVE_SCALAPACK
BlacsGrid::BlacsGrid(const comm::Communicator& c) {
  const auto* mc = dynamic_cast<const comm::MpiCommunicator*>(&c);
  TESSERA_EXPECTS(mc != nullptr, "--svd scalapack needs an MPI communicator");
  handle_ = Csys2blacs_handle(mc->mpi_comm());
  ctxt_ = handle_;
  Cblacs_gridinit(&ctxt_, "R", c.size(), 1);
  int nprow = 0, npcol = 0, row = -1, col = 0;
  Cblacs_gridinfo(ctxt_, &nprow, &npcol, &row, &col);
  TESSERA_EXPECTS(
      nprow == c.size() && npcol == 1 && row == c.rank(),
      "BLACS grid disagrees with the communicator (row " << row << ", rank " << c.rank() << ")");
}

BlacsGrid::~BlacsGrid() {
  Cblacs_gridexit(ctxt_);
  Cfree_blacs_system_handle(handle_);
}
#else
BlacsGrid::BlacsGrid(const comm::Communicator&) {}

BlacsGrid::~BlacsGrid() = default;
#endif

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
template void update_scalapack<float>(const float*, const RowsView&, int, std::vector<double>&,
                                      Net&, const BlacsGrid&);
template void update_scalapack<double>(const double*, const RowsView&, int, std::vector<double>&,
                                       Net&, const BlacsGrid&);

}  // namespace tessera::algo::detail

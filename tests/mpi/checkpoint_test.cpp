// Checkpoint and restart: a CP-ALS or Tucker-HOOI run resumed from the state after
// iteration k equals the uninterrupted run (bitwise on the same ranks, within rounding
// when the checkpoint was taken at another rank count), for both CP strategies, float and
// double, every Tucker SVD method; the checkpoint file (round trip, checksum, damaged
// files, atomic replacement) and the checks that a checkpoint matches the run resuming
// it. Runs under mpiexec at several rank counts.
#include "io/checkpoint.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "algo/cp_als.hpp"
#include "algo/generate.hpp"
#include "algo/tucker.hpp"
#include "comm/mpi_communicator.hpp"
#include "gather_util.hpp"
#include "io/model_io.hpp"
#include "kernels/backend.hpp"
#include "test_util.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using algo::CommStrategy;
using algo::SvdMethod;
using algo::TuckerInit;
using kernels::BackendKind;

comm::MpiCommunicator& world() {
  static comm::MpiCommunicator w(MPI_COMM_WORLD);
  return w;
}

/// A noisy rank-4 tensor with realistic sparsity (this rank's share of it).
SparseTensor<double> test_tensor(std::uint64_t seed = 21) {
  algo::GenerateOptions o;
  o.dims = {40, 30, 35};
  o.nnz = 5000;
  o.rank = 4;
  o.noise = 0.1;
  o.seed = seed;
  o.structure = algo::Structure::sampled;
  return algo::generate(o, world()).block;
}

using test::gather_all;

/// The share of `all` a member of `c` holds: nonzero k on rank k % size.
template <typename T>
SparseTensor<T> share_of(const SparseTensor<T>& all, const comm::Communicator& c) {
  SparseTensor<T> x(all.dims);
  std::vector<index_t> co(all.dims.size());
  for (nnz_t k = 0; k < all.nnz(); ++k) {
    if (k % c.size() != c.rank()) continue;
    for (int n = 0; n < all.order(); ++n) co[n] = all.idx[n][k];
    x.push_back(co.data(), all.vals[k]);
  }
  return x;
}

std::string what_cp(CommStrategy s, const char* type) {
  return algo::to_string(s) + "/" + type + " on " + std::to_string(world().size()) + " ranks";
}

template <typename T>
const char* type_name() {
  return std::is_same_v<T, double> ? "double" : "float";
}

/// CP-ALS on `x` over `c`; with `capture`, keeps the state after iteration `capture_at`.
template <typename T>
algo::CpResult cp_run(SparseTensor<T> x, const comm::Communicator& c, CommStrategy s, int iters,
                      const algo::CpState* resume = nullptr, algo::CpState* capture = nullptr,
                      int capture_at = 0, double tol = 0.0) {
  auto scheme = s == CommStrategy::layer ? partition::Scheme::grid : partition::Scheme::nnz;
  auto d = partition::distribute(std::move(x), scheme, {}, c);
  auto be = kernels::make_backend<T>(BackendKind::cpu, 1);
  algo::CpOptions o;
  o.rank = 4;
  o.max_iters = iters;
  o.tol = tol;
  o.seed = 5;
  o.strategy = s;
  o.print_iterations = false;
  o.resume = resume;
  if (capture) {
    o.state_every = capture_at;
    o.on_iteration = [&](const algo::CpState& st) {
      if (st.iteration == capture_at) *capture = st;
    };
  }
  return algo::cp_als<T>(d, *be, c, c, o);
}

/// Largest relative difference (Frobenius) of the factors and lambda.
double cp_gap(const KruskalModel& a, const KruskalModel& b) {
  auto rel = [](const std::vector<double>& x, const std::vector<double>& y) {
    double num = 0, den = 0;
    for (std::size_t k = 0; k < x.size(); ++k) {
      num += (x[k] - y[k]) * (x[k] - y[k]);
      den += x[k] * x[k];
    }
    return std::sqrt(num / std::max(den, 1e-300));
  };
  double g = rel(a.lambda, b.lambda);
  for (int n = 0; n < a.order(); ++n) g = std::max(g, rel(a.factors[n].data, b.factors[n].data));
  return g;
}

/// || B - A A^T B ||_F, maximised over modes (0 when the spans agree).
double tucker_gap(const TuckerModel& a, const TuckerModel& b) {
  double worst = 0;
  for (int n = 0; n < a.order(); ++n) {
    const auto& A = a.factors[n];
    const auto& B = b.factors[n];
    std::vector<double> M(static_cast<std::size_t>(A.cols * B.cols), 0.0);
    for (std::int64_t i = 0; i < A.rows; ++i)
      for (std::int64_t p = 0; p < A.cols; ++p)
        for (std::int64_t q = 0; q < B.cols; ++q) M[p * B.cols + q] += A(i, p) * B(i, q);
    double s = 0;
    for (std::int64_t i = 0; i < A.rows; ++i)
      for (std::int64_t q = 0; q < B.cols; ++q) {
        double v = B(i, q);
        for (std::int64_t p = 0; p < A.cols; ++p) v -= A(i, p) * M[p * B.cols + q];
        s += v * v;
      }
    worst = std::max(worst, std::sqrt(s));
  }
  return worst;
}

/// Ranks [0, members) of the world in one communicator (the others in a second one).
std::unique_ptr<comm::Communicator> first_ranks(int members) {
  return world().split(world().rank() < members ? 0 : 1, world().rank());
}

/// Moves a state through a checkpoint file: rank 0 writes it, every rank reads it.
io::CheckpointInfo through_file(const std::string& name, const KruskalModel& m,
                                const algo::CpState& s, KruskalModel* out) {
  const std::string path = test::temp_dir() + "/" + name;
  io::CheckpointInfo info;
  info.iteration = s.iteration;
  info.converged = s.converged;
  info.fit_history = s.fit_history;
  info.input.dims = m.dims;
  comm::run_collectively(world(), [&] {
    if (world().rank() == 0) io::write_cp_checkpoint(path, m, info);
  });
  io::CheckpointInfo back;
  *out = io::read_cp_checkpoint(path, &back);
  return back;
}

// ---- CP-ALS ---------------------------------------------------------------------------

template <typename T>
void cp_same_ranks(CommStrategy s) {
  const auto x = test_tensor();
  algo::CpState at3;
  auto full = cp_run<T>(x.cast<T>(), world(), s, 7, nullptr, &at3, 3);
  ASSERT_EQ(full.iterations, 7);
  ASSERT_EQ(at3.iteration, 3);
  ASSERT_EQ(at3.fit_history.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(at3.fit_history[i], full.history[i].fit);
  EXPECT_FALSE(at3.converged);

  auto resumed = cp_run<T>(x.cast<T>(), world(), s, 7, &at3);
  const std::string what = what_cp(s, type_name<T>());
  ASSERT_EQ(resumed.iterations, 7) << what;
  ASSERT_EQ(resumed.history.size(), 7u) << what;
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(resumed.history[i].fit, full.history[i].fit) << what << " iteration " << i + 1;
    EXPECT_EQ(resumed.history[i].iter, i + 1);
  }
  EXPECT_EQ(resumed.fit, full.fit) << what;
  // Bitwise: the same ranks and backend do the same operations in the same order.
  EXPECT_EQ(cp_gap(full.model, resumed.model), 0.0) << what;
}

TEST(CpResume, SameRanksIsBitwiseIdentical) {
  for (auto s : {CommStrategy::allreduce, CommStrategy::layer}) {
    cp_same_ranks<double>(s);
    cp_same_ranks<float>(s);
  }
}

TEST(CpResume, ConvergenceTestUsesTheSavedFit) {
  const auto x = test_tensor();
  // Stops when the fit changes by less than 1e-3; resume one iteration before that.
  auto full = cp_run<double>(x, world(), CommStrategy::allreduce, 200, nullptr, nullptr, 0, 1e-3);
  ASSERT_TRUE(full.converged);
  ASSERT_GE(full.iterations, 3);
  algo::CpState before;
  cp_run<double>(x, world(), CommStrategy::allreduce, 200, nullptr, &before, full.iterations - 1,
                 1e-3);
  ASSERT_EQ(before.iteration, full.iterations - 1);
  EXPECT_FALSE(before.converged);
  auto resumed =
      cp_run<double>(x, world(), CommStrategy::allreduce, 200, &before, nullptr, 0, 1e-3);
  EXPECT_TRUE(resumed.converged);
  EXPECT_EQ(resumed.iterations, full.iterations);
  EXPECT_EQ(cp_gap(full.model, resumed.model), 0.0);

  // A converged state, or one at the iteration limit, runs no iteration: the saved model.
  algo::CpState last;
  cp_run<double>(x, world(), CommStrategy::allreduce, 200, nullptr, &last, full.iterations, 1e-3);
  ASSERT_TRUE(last.converged);
  auto again = cp_run<double>(x, world(), CommStrategy::allreduce, 500, &last, nullptr, 0, 1e-3);
  EXPECT_EQ(again.iterations, full.iterations);
  EXPECT_TRUE(again.converged);
  EXPECT_EQ(cp_gap(full.model, again.model), 0.0);
  EXPECT_EQ(again.fit, full.fit);
  algo::CpState at4;
  auto four = cp_run<double>(x, world(), CommStrategy::layer, 4, nullptr, &at4, 4);
  auto none = cp_run<double>(x, world(), CommStrategy::layer, 4, &at4);
  EXPECT_EQ(none.iterations, 4);
  EXPECT_FALSE(none.converged);
  EXPECT_EQ(cp_gap(four.model, none.model), 0.0);
}

TEST(CpResume, CallbackEveryKthIterationOnEveryRank) {
  const auto x = test_tensor();
  auto d = partition::distribute(SparseTensor<double>(x), partition::Scheme::nnz, {}, world());
  auto be = kernels::make_backend<double>(BackendKind::reference, 1);
  algo::CpOptions o;
  o.rank = 3;
  o.max_iters = 7;
  o.tol = 0;
  o.print_iterations = false;
  o.state_every = 2;
  std::vector<int> seen;
  o.on_iteration = [&](const algo::CpState& s) {
    seen.push_back(s.iteration);
    EXPECT_EQ(static_cast<int>(s.fit_history.size()), s.iteration);
    EXPECT_EQ(s.model.rank, 3);
    EXPECT_EQ(s.model.dims, x.dims);
  };
  algo::cp_als<double>(d, *be, world(), world(), o);
  EXPECT_EQ(seen, (std::vector<int>{2, 4, 6}));
}

template <typename T>
void cp_other_ranks(CommStrategy s, double fit_tol, double model_tol) {
  const auto x = test_tensor();
  const auto all = gather_all(x, world());
  const int members = std::max(world().size() - 1, 1);
  auto sub = first_ranks(members);
  algo::CpState at3;
  if (world().rank() < members)
    cp_run<T>(share_of(all.cast<T>(), *sub), *sub, s, 7, nullptr, &at3, 3);
  // Through the file, as a job would: rank 0 (a member) writes, every rank reads.
  KruskalModel m;
  const auto info =
      through_file("cp-" + algo::to_string(s) + type_name<T>() + ".ckpt.h5", at3.model, at3, &m);
  algo::CpState state;
  state.iteration = info.iteration;
  state.fit_history = info.fit_history;
  state.converged = info.converged;
  state.model = m;
  ASSERT_EQ(state.iteration, 3);

  auto full = cp_run<T>(x.cast<T>(), world(), s, 7);
  auto resumed = cp_run<T>(x.cast<T>(), world(), s, 7, &state);
  const std::string what =
      what_cp(s, type_name<T>()) + ", checkpoint from " + std::to_string(members) + " ranks";
  ASSERT_EQ(resumed.iterations, 7) << what;
  for (int i = 0; i < 7; ++i)
    EXPECT_NEAR(resumed.history[i].fit, full.history[i].fit, fit_tol)
        << what << " iteration " << i + 1;
  EXPECT_LT(cp_gap(full.model, resumed.model), model_tol) << what;
}

TEST(CpResume, CheckpointFromOtherRankCountWithinRounding) {
  for (auto s : {CommStrategy::allreduce, CommStrategy::layer}) {
    cp_other_ranks<double>(s, 1e-10, 1e-8);
    cp_other_ranks<float>(s, 2e-4, 2e-3);
  }
}

TEST(CpResume, WrongShapeIsInputErrorOnEveryRank) {
  const auto x = test_tensor();
  algo::CpState s;
  cp_run<double>(x, world(), CommStrategy::allreduce, 2, nullptr, &s, 2);
  auto d = partition::distribute(SparseTensor<double>(x), partition::Scheme::nnz, {}, world());
  auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
  algo::CpOptions o;
  o.rank = 5;  // the state has rank 4
  o.print_iterations = false;
  o.resume = &s;
  EXPECT_THROW(algo::cp_als<double>(d, *be, world(), world(), o), InputError);
  o.rank = 4;
  s.fit_history.pop_back();
  EXPECT_THROW(algo::cp_als<double>(d, *be, world(), world(), o), InputError);
}

// ---- Tucker-HOOI ------------------------------------------------------------------------

template <typename T>
algo::TuckerResult tucker_run(SparseTensor<T> x, const comm::Communicator& c, SvdMethod svd,
                              TuckerInit init, int iters, const algo::TuckerState* resume = nullptr,
                              algo::TuckerState* capture = nullptr, int capture_at = 0,
                              std::vector<int> ranks = {4, 3, 3}) {
  auto d = partition::distribute(std::move(x), partition::Scheme::nnz, {}, c);
  auto be = kernels::make_backend<T>(BackendKind::cpu, 1);
  algo::TuckerOptions o;
  o.ranks = std::move(ranks);
  o.max_iters = iters;
  o.tol = 0;
  o.seed = 7;
  o.svd = svd;
  o.init = init;
  o.subspace_steps = 2;
  o.print_iterations = false;
  o.resume = resume;
  if (capture) {
    o.state_every = capture_at;
    o.on_iteration = [&](const algo::TuckerState& st) {
      if (st.iteration == capture_at) *capture = st;
    };
  }
  return algo::tucker_hooi<T>(d, *be, c, o);
}

std::vector<SvdMethod> svd_methods() {
  std::vector<SvdMethod> m{SvdMethod::gram, SvdMethod::subspace};
  if (algo::scalapack_available()) m.push_back(SvdMethod::scalapack);
  return m;
}

template <typename T>
void tucker_same_ranks(SvdMethod svd, TuckerInit init) {
  const auto x = test_tensor();
  const std::string what = algo::to_string(svd) + "/" + algo::to_string(init) + "/" +
                           type_name<T>() + " on " + std::to_string(world().size()) + " ranks";
  algo::TuckerState at2;
  auto full = tucker_run<T>(x.cast<T>(), world(), svd, init, 5, nullptr, &at2, 2);
  ASSERT_EQ(full.iterations, 5) << what;
  ASSERT_EQ(at2.iteration, 2) << what;
  auto resumed = tucker_run<T>(x.cast<T>(), world(), svd, init, 5, &at2);
  ASSERT_EQ(resumed.iterations, 5) << what;
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(resumed.history[i].fit, full.history[i].fit) << what << " iteration " << i + 1;
  EXPECT_EQ(resumed.model.core, full.model.core) << what;
  for (int n = 0; n < 3; ++n)
    EXPECT_EQ(resumed.model.factors[n].data, full.model.factors[n].data) << what << " mode " << n;
}

TEST(TuckerResume, SameRanksIsBitwiseIdentical) {
  for (auto svd : svd_methods()) {
    tucker_same_ranks<double>(svd, TuckerInit::random);
    tucker_same_ranks<float>(svd, TuckerInit::random);
  }
  tucker_same_ranks<double>(SvdMethod::gram, TuckerInit::hosvd);
}

TEST(TuckerResume, CheckpointFromOtherRankCountWithinRounding) {
  const auto x = test_tensor();
  const auto all = gather_all(x, world());
  const int members = std::max(world().size() - 1, 1);
  auto sub = first_ranks(members);
  for (auto svd : {SvdMethod::gram, SvdMethod::subspace}) {
    algo::TuckerState at2;
    if (world().rank() < members)
      tucker_run<double>(share_of(all, *sub), *sub, svd, TuckerInit::random, 5, nullptr, &at2, 2);
    const std::string path = test::temp_dir() + "/tucker-" + algo::to_string(svd) + ".ckpt.h5";
    io::CheckpointInfo info;
    info.iteration = at2.iteration;
    info.fit_history = at2.fit_history;
    info.input.dims = x.dims;
    comm::run_collectively(world(), [&] {
      if (world().rank() == 0) io::write_tucker_checkpoint(path, at2.model, info);
    });
    algo::TuckerState state;
    io::CheckpointInfo back;
    state.model = io::read_tucker_checkpoint(path, &back);
    state.iteration = back.iteration;
    state.fit_history = back.fit_history;
    ASSERT_EQ(state.iteration, 2);

    auto full = tucker_run<double>(x, world(), svd, TuckerInit::random, 5);
    auto resumed = tucker_run<double>(x, world(), svd, TuckerInit::random, 5, &state);
    const std::string what = algo::to_string(svd) + " on " + std::to_string(world().size()) +
                             " ranks, checkpoint from " + std::to_string(members);
    ASSERT_EQ(resumed.iterations, 5) << what;
    for (int i = 0; i < 5; ++i)
      EXPECT_NEAR(resumed.history[i].fit, full.history[i].fit, 1e-10)
          << what << " iteration " << i + 1;
    EXPECT_LT(tucker_gap(full.model, resumed.model), 1e-7) << what;
  }
}

TEST(TuckerResume, CompleteStateRunsNothingAndWrongRanksAreInputErrors) {
  const auto x = test_tensor();
  algo::TuckerState at3;
  auto full =
      tucker_run<double>(x, world(), SvdMethod::gram, TuckerInit::random, 3, nullptr, &at3, 3);
  auto none = tucker_run<double>(x, world(), SvdMethod::gram, TuckerInit::random, 3, &at3);
  EXPECT_EQ(none.iterations, 3);
  EXPECT_EQ(none.fit, full.fit);
  EXPECT_EQ(none.model.core, full.model.core);
  EXPECT_NEAR(none.core_norm, full.core_norm, 1e-12 * full.core_norm);
  for (int n = 0; n < 3; ++n) EXPECT_EQ(none.model.factors[n].data, full.model.factors[n].data);
  EXPECT_THROW(tucker_run<double>(x, world(), SvdMethod::gram, TuckerInit::random, 5, &at3, nullptr,
                                  0, {3, 3, 3}),
               InputError);
}

// ---- the checkpoint file ---------------------------------------------------------------

/// A file name unique to this rank (the file tests run on every rank independently).
std::string rank_file(const std::string& name) {
  return test::temp_dir() + "/r" + std::to_string(world().rank()) + "-" + name;
}

struct Saved {
  KruskalModel model;
  io::CheckpointInfo info;
};

/// A CP state after `iters` iterations and its checkpoint record.
Saved cp_saved(int iters) {
  static const auto x = test_tensor();
  algo::CpState s;
  cp_run<double>(x, world(), CommStrategy::allreduce, iters, nullptr, &s, iters);
  Saved out;
  out.model = s.model;
  out.info.iteration = s.iteration;
  out.info.fit_history = s.fit_history;
  out.info.converged = s.converged;
  out.info.precision = "double";
  out.info.input = io::tensor_fingerprint<double>(x, {}, world());
  out.info.options_json = R"({"rank":4,"iters":6,"seed":5})";
  return out;
}

std::vector<std::string> leftovers(const std::string& path) {
  std::vector<std::string> out;
  const auto name = fs::path(path).filename().string();
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path())) {
    const auto f = e.path().filename().string();
    if (f != name && f.rfind(name, 0) == 0) out.push_back(f);
  }
  return out;
}

/// The message of the InputError f() throws ("" when it throws nothing).
template <typename F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointFile, RoundTripIsExactAndAlsoAModelFile) {
  const auto s = cp_saved(3);
  const auto path = rank_file("roundtrip.ckpt.h5");
  io::write_cp_checkpoint(path, s.model, s.info);
  io::CheckpointInfo back;
  const auto m = io::read_cp_checkpoint(path, &back);
  EXPECT_EQ(m.dims, s.model.dims);
  EXPECT_EQ(m.rank, s.model.rank);
  EXPECT_EQ(m.lambda, s.model.lambda);
  for (int n = 0; n < m.order(); ++n) EXPECT_EQ(m.factors[n].data, s.model.factors[n].data);
  EXPECT_EQ(back.iteration, 3);
  EXPECT_EQ(back.fit_history, s.info.fit_history);
  EXPECT_EQ(back.converged, s.info.converged);
  EXPECT_EQ(back.precision, "double");
  EXPECT_EQ(back.input.dims, s.info.input.dims);
  EXPECT_EQ(back.input.nnz, s.info.input.nnz);
  EXPECT_EQ(back.input.norm2, s.info.input.norm2);
  EXPECT_EQ(back.input.coord_hash, s.info.input.coord_hash);
  EXPECT_EQ(back.options_json, s.info.options_json);
  // The checkpoint is a valid model file too (the model after its last iteration).
  io::ModelRecord rec;
  const auto asmodel = io::read_kruskal_h5(path, &rec);
  EXPECT_EQ(asmodel.lambda, s.model.lambda);
  EXPECT_EQ(rec.iterations, 3);
  EXPECT_EQ(rec.fit, s.info.fit_history.back());
  EXPECT_TRUE(leftovers(path).empty());

  // Tucker, with its core.
  TuckerModel t;
  t.dims = {5, 4, 3};
  t.ranks = {2, 2, 1};
  for (int i = 0; i < 4; ++i) t.core.push_back(0.5 * i - 0.3);
  for (int n = 0; n < 3; ++n) {
    Matrix<double> F(static_cast<std::int64_t>(t.dims[n]), t.ranks[n]);
    for (std::size_t k = 0; k < F.data.size(); ++k) F.data[k] = std::sin(1.0 + k + n);
    t.factors.push_back(F);
  }
  io::CheckpointInfo ti;
  ti.iteration = 2;
  ti.fit_history = {0.25, 0.5};
  ti.precision = "float";
  ti.input.dims = t.dims;
  ti.input.nnz = 17;
  const auto tpath = rank_file("tucker.ckpt.h5");
  io::write_tucker_checkpoint(tpath, t, ti);
  io::CheckpointInfo tb;
  const auto tm = io::read_tucker_checkpoint(tpath, &tb);
  EXPECT_EQ(tm.core, t.core);
  EXPECT_EQ(tm.ranks, t.ranks);
  for (int n = 0; n < 3; ++n) EXPECT_EQ(tm.factors[n].data, t.factors[n].data);
  EXPECT_EQ(tb.precision, "float");
  EXPECT_EQ(tb.input.nnz, 17u);
  // The wrong kind of checkpoint names both.
  const auto msg = input_error([&] { io::read_cp_checkpoint(tpath, nullptr); });
  EXPECT_NE(msg.find("'tessera-tucker' model, this run needs 'tessera-kruskal'"), std::string::npos)
      << msg;
}

TEST(CheckpointFile, DamagedOrWrongFilesAreClearErrors) {
  const auto s = cp_saved(2);
  const auto good = rank_file("good.ckpt.h5");
  io::write_cp_checkpoint(good, s.model, s.info);
  std::string bytes;
  {
    std::ifstream f(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  ASSERT_GT(bytes.size(), 1000u);
  auto write_bytes = [](const std::string& p, const std::string& b) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << b;
  };
  auto read_error = [](const std::string& p) {
    return input_error([&] { io::read_cp_checkpoint(p, nullptr); });
  };

  // Truncated (a copy cut in half, as by a full disk without the atomic rename).
  const auto cut = rank_file("cut.ckpt.h5");
  write_bytes(cut, bytes.substr(0, bytes.size() / 2));
  auto msg = read_error(cut);
  EXPECT_NE(msg.find("cannot resume from checkpoint '" + cut + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated or corrupted"), std::string::npos) << msg;

  // Corrupted factor data (a byte of a stored value flipped): caught by the checksum.
  double probe = s.model.factors[1].data[7];
  std::string pattern(reinterpret_cast<const char*>(&probe), sizeof(probe));
  const auto at = bytes.find(pattern);
  ASSERT_NE(at, std::string::npos);
  std::string flipped = bytes;
  flipped[at + 3] = static_cast<char>(flipped[at + 3] ^ 0x10);
  const auto bad = rank_file("flipped.ckpt.h5");
  write_bytes(bad, flipped);
  msg = read_error(bad);
  EXPECT_NE(msg.find("checksum mismatch"), std::string::npos) << msg;
  EXPECT_NE(msg.find(bad), std::string::npos) << msg;

  // Empty, missing, a folder, a plain model file.
  const auto empty = rank_file("empty.ckpt.h5");
  write_bytes(empty, "");
  msg = read_error(empty);
  EXPECT_NE(msg.find("not an HDF5 file"), std::string::npos) << msg;
  msg = read_error(rank_file("missing.ckpt.h5"));
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  msg = read_error(test::temp_dir());
  EXPECT_NE(msg.find("is a folder"), std::string::npos) << msg;
  const auto model = rank_file("model.h5");
  io::ModelRecord rec;
  rec.iterations = 2;
  rec.fit_history = s.info.fit_history;
  io::write_kruskal_h5(model, s.model, rec);
  msg = read_error(model);
  EXPECT_NE(msg.find("not a checkpoint"), std::string::npos) << msg;
}

TEST(CheckpointFile, ReplacementIsAtomic) {
  const auto old_state = cp_saved(2);
  const auto new_state = cp_saved(4);
  const auto path = rank_file("atomic.ckpt.h5");
  io::write_cp_checkpoint(path, old_state.model, old_state.info);

  // A write that fails after the temporary file is complete: the old checkpoint is intact
  // during and after it, and no temporary file is left.
  io::CheckpointWriteHooks hooks;
  bool called = false;
  hooks.before_rename = [&](const std::string& tmp) {
    called = true;
    EXPECT_TRUE(fs::exists(tmp));
    EXPECT_EQ(fs::path(tmp).parent_path(), fs::path(path).parent_path());
    io::CheckpointInfo during;
    io::read_cp_checkpoint(path, &during);
    EXPECT_EQ(during.iteration, 2);
    throw std::runtime_error("simulated failure (disk full)");
  };
  auto msg =
      input_error([&] { io::write_cp_checkpoint(path, new_state.model, new_state.info, &hooks); });
  EXPECT_TRUE(called);
  EXPECT_NE(msg.find("cannot write checkpoint '" + path + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("simulated failure"), std::string::npos) << msg;
  EXPECT_TRUE(leftovers(path).empty());
  io::CheckpointInfo after;
  const auto m = io::read_cp_checkpoint(path, &after);
  EXPECT_EQ(after.iteration, 2);
  EXPECT_EQ(m.lambda, old_state.model.lambda);

  // The next write replaces it.
  io::write_cp_checkpoint(path, new_state.model, new_state.info);
  io::read_cp_checkpoint(path, &after);
  EXPECT_EQ(after.iteration, 4);
  EXPECT_TRUE(leftovers(path).empty());

  // Unwritable places: clear messages, nothing left behind.
  const auto nowhere = test::temp_dir() + "/no-such-folder/x.ckpt.h5";
  msg = input_error([&] { io::check_checkpoint_writable(nowhere); });
  EXPECT_NE(msg.find("folder '" + test::temp_dir() + "/no-such-folder' does not exist"),
            std::string::npos)
      << msg;
  msg = input_error([&] { io::write_cp_checkpoint(nowhere, new_state.model, new_state.info); });
  EXPECT_NE(msg.find("cannot write checkpoint '" + nowhere + "'"), std::string::npos) << msg;
  msg = input_error([&] { io::check_checkpoint_writable(test::temp_dir()); });
  EXPECT_NE(msg.find("it is a folder"), std::string::npos) << msg;
  EXPECT_EQ(input_error([&] { io::check_checkpoint_writable(path); }), "");
  EXPECT_EQ(io::default_checkpoint_path("out/model.h5"), "out/model.ckpt.h5");
  EXPECT_EQ(io::default_checkpoint_path("model"), "model.ckpt.h5");
}

// ---- does a checkpoint match the run resuming it? ------------------------------------

TEST(CheckpointMatch, FingerprintIgnoresRankCountAndRelabelling) {
  const auto x = test_tensor();
  const auto fp = io::tensor_fingerprint<double>(x, {}, world());
  EXPECT_EQ(fp.nnz, static_cast<std::uint64_t>(world().allreduce_value(x.nnz())));
  EXPECT_EQ(fp.dims, x.dims);
  // Distributed another way (after summing repeats), relabelled, on fewer ranks.
  auto d = partition::distribute_relabelled(SparseTensor<double>(x), partition::Scheme::grid, {},
                                            world(), 99);
  const auto fd = io::tensor_fingerprint<double>(
      d.block, [&](int n, std::uint64_t i) { return d.dist.original_index(n, i); }, world());
  EXPECT_EQ(fd.nnz, fp.nnz);
  EXPECT_EQ(fd.coord_hash, fp.coord_hash);
  EXPECT_NEAR(fd.norm2, fp.norm2, 1e-12 * fp.norm2);
  const auto all = gather_all(x, world());
  auto sub = first_ranks(1);
  const auto fs1 = io::tensor_fingerprint<double>(share_of(all, *sub), {}, *sub);
  if (world().rank() == 0) {
    EXPECT_EQ(fs1.coord_hash, fp.coord_hash);
    EXPECT_NEAR(fs1.norm2, fp.norm2, 1e-12 * fp.norm2);
  }
  // A relabelled block without the map back is a different tensor.
  const auto wrong = io::tensor_fingerprint<double>(d.block, {}, world());
  EXPECT_NE(wrong.coord_hash, fp.coord_hash);
}

TEST(CheckpointMatch, MismatchesAreNamed) {
  const auto x = test_tensor();
  io::CheckpointInfo saved;
  saved.iteration = 2;
  saved.fit_history = {0.1, 0.2};
  saved.precision = "double";
  saved.input = io::tensor_fingerprint<double>(x, {}, world());
  saved.options_json = R"({"file":"a.tns","rank":4,"iters":6,"tol":0.0,"seed":5})";
  io::ResumeCheck now;
  now.input = saved.input;
  now.precision = "double";
  now.options_json = R"({"file":"b.tns","rank":4,"iters":10,"tol":0.0,"seed":5})";
  now.must_match = {"rank"};
  now.ignore = {"file"};
  // Same tensor and rank: the changed iteration limit is a note, not an error.
  const auto notes = io::check_resume("c.h5", saved, now);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "iters: 6 -> 10");

  auto expect_error = [&](const io::ResumeCheck& r, const std::string& part) {
    const auto msg = input_error([&] { io::check_resume("c.h5", saved, r); });
    EXPECT_NE(msg.find("checkpoint 'c.h5' does not match this run"), std::string::npos) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  auto r = now;
  r.options_json = R"({"rank":5,"iters":6})";
  expect_error(r, "--rank 4 in the checkpoint, 5 now");
  r = now;
  r.precision = "float";
  expect_error(r, "precision double in the checkpoint, float now");
  // Another tensor: other coordinates, other values, other nonzero count, other shape.
  r = now;
  auto mirrored = x;  // the same values at other coordinates
  for (auto& i : mirrored.idx[0]) i = static_cast<index_t>(x.dims[0] - 1 - i);
  r.input = io::tensor_fingerprint<double>(mirrored, {}, world());
  expect_error(r, "coordinates of the tensor's nonzeros differ");
  r.input = io::tensor_fingerprint<double>(test_tensor(22), {}, world());
  expect_error(r, "in the checkpoint");
  r = now;
  auto scaled = x;
  for (auto& v : scaled.vals) v *= 1.001;
  r.input = io::tensor_fingerprint<double>(scaled, {}, world());
  expect_error(r, "sum of squared values");
  r = now;
  r.input.nnz += 1;
  expect_error(r, "tensor nonzeros " + std::to_string(saved.input.nnz) + " in the checkpoint, " +
                      std::to_string(saved.input.nnz + 1) + " now");
  r = now;
  r.input.dims = {40, 30, 36};
  expect_error(r, "tensor dims 40x30x35 in the checkpoint, 40x30x36 now");
}

}  // namespace
}  // namespace tessera

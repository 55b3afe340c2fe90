// Issue 22, points 2-3 at the library level: no crash, hang or silent wrong result.
//  - thread counts are capped to the CPUs the process may use (affinity, cgroup quota);
//  - values far from 1 (1e200, 1e-200 in double; 1e-30 in float) give the fit of the same
//    tensor near 1, and values single precision cannot hold are refused with FILE:LINE;
//  - data after a gzip member is an error naming its byte (another member is fine);
//  - FIFOs, devices and directories are refused at once, never waited on;
//  - a store with dims of 2^32 is refused by the planner, naming the mode and the bytes;
//  - an all-zero tensor is one agreed CollectiveError naming it;
//  - comm::FirstFailure lets exactly one failing rank print.
// Runs alone and under mpiexec (tests/harden.cmake).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "algo/cp_als.hpp"
#include "algo/generate.hpp"
#include "algo/tucker.hpp"
#include "comm/first_failure.hpp"
#include "comm/mpi_communicator.hpp"
#include "io/h5store.hpp"
#include "io/tns.hpp"
#include "kernels/factories.hpp"
#include "plan/limits.hpp"
#include "plan/measure.hpp"
#include "plan/planner.hpp"
#include "util/cpus.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using kernels::BackendKind;

comm::MpiCommunicator& world() {
  static comm::MpiCommunicator w(MPI_COMM_WORLD);
  return w;
}

/// A folder every rank shares (made by rank 0), removed at the end of the test.
class Harden : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string d;
    if (world().rank() == 0) {
      d = (fs::temp_directory_path() /
           ("tessera-harden-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name()))
              .string();
      fs::remove_all(d);
      fs::create_directories(d);
    }
    std::int64_t n = static_cast<std::int64_t>(d.size());
    world().broadcast(&n, 1, 0);
    d.resize(static_cast<std::size_t>(n));
    world().broadcast(d.data(), d.size(), 0);
    dir_ = d;
  }
  void TearDown() override {
    world().barrier();
    if (world().rank() == 0) fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  /// Rank 0 writes `bytes`; every rank returns after it is there.
  std::string put(const std::string& name, const std::string& bytes) {
    const std::string p = path(name);
    if (world().rank() == 0) {
      std::ofstream f(p, std::ios::binary);
      f << bytes;
    }
    world().barrier();
    return p;
  }
  std::string dir_;
};

std::string gzip(const std::string& text) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, static_cast<uLong>(text.size())) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

/// Lines "i j k v" of `n` distinct coordinates of a 6x5x4 tensor, values 1..n.
std::string tns_lines(int first, int n) {
  std::string s;
  for (int q = first; q < first + n; ++q)
    s += std::to_string(q / 20 + 1) + " " + std::to_string(q / 4 % 5 + 1) + " " +
         std::to_string(q % 4 + 1) + " " + std::to_string(q + 1) + "\n";
  return s;
}

/// read_tns must throw a CollectiveError containing every one of `parts`.
void expect_read_error(const std::string& file, const io::TnsReadOptions& o,
                       const std::vector<std::string>& parts, const comm::Communicator& c) {
  try {
    io::read_tns(file, c, o);
    ADD_FAILURE() << file << ": expected an error";
  } catch (const CollectiveError& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << "\nwant: " << p;
  }
}

// ---- threads -------------------------------------------------------------------------

/// Writes `text` at root/rel, creating folders.
void fixture(const fs::path& root, const std::string& rel, const std::string& text) {
  const fs::path p = root / rel;
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

TEST_F(Harden, CgroupCpuQuotaFromFixtures) {
  const fs::path r = fs::path(path("cg-rank" + std::to_string(world().rank())));
  // v2: a quota of 1.5 CPUs on the leaf, 4 on its parent -> 2 (rounded up), the smaller.
  fixture(r, "proc/self/cgroup", "0::/job/step\n");
  fixture(r, "sys/fs/cgroup/job/step/cpu.max", "150000 100000\n");
  fixture(r, "sys/fs/cgroup/job/cpu.max", "400000 100000\n");
  fixture(r, "sys/fs/cgroup/cpu.max", "max 100000\n");
  std::string src;
  auto q = util::cgroup_cpu_quota(r.string(), &src);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(*q, 2);
  EXPECT_NE(src.find("job/step/cpu.max"), std::string::npos) << src;
  // No quota anywhere ("max"): none.
  fixture(r, "sys/fs/cgroup/job/step/cpu.max", "max 100000\n");
  fixture(r, "sys/fs/cgroup/job/cpu.max", "max\n");
  EXPECT_FALSE(util::cgroup_cpu_quota(r.string(), &src).has_value());
  // v1 with the cpu controller: quota / period, -1 = none.
  const fs::path r1 = r / "v1";
  fixture(r1, "proc/self/cgroup", "4:memory:/a\n3:cpu,cpuacct:/a/b\n0::/\n");
  fixture(r1, "sys/fs/cgroup/cpu/a/b/cpu.cfs_quota_us", "-1\n");
  fixture(r1, "sys/fs/cgroup/cpu/a/b/cpu.cfs_period_us", "100000\n");
  fixture(r1, "sys/fs/cgroup/cpu/a/cpu.cfs_quota_us", "300000\n");
  fixture(r1, "sys/fs/cgroup/cpu/a/cpu.cfs_period_us", "100000\n");
  q = util::cgroup_cpu_quota(r1.string(), &src);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(*q, 3);
  // usable_cpus: the smaller of the affinity mask and the quota.
  const util::CpuLimit l = util::usable_cpus(r1.string());
  EXPECT_EQ(l.cpus, std::min(3, util::affinity_cpus()));
  // Unreadable or absent files: no quota, no error.
  EXPECT_FALSE(util::cgroup_cpu_quota((r / "nothing").string(), &src).has_value());
}

TEST_F(Harden, ThreadRequestsAreCappedToTheUsableCpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(util::affinity_cpus(), CPU_COUNT(&set));
  const int usable = util::usable_cpus().cpus;
  ASSERT_GE(usable, 1);
  EXPECT_LE(usable, util::affinity_cpus());
  std::string warning;
  EXPECT_EQ(util::cap_threads(1, "--threads 1", &warning), 1);
  EXPECT_TRUE(warning.empty());
  EXPECT_EQ(util::cap_threads(0, "--threads 0", &warning), 0);  // 0: OpenMP's default
  EXPECT_EQ(util::cap_threads(100000, "--threads 100000", &warning), usable);
  EXPECT_NE(warning.find("--threads 100000"), std::string::npos) << warning;
  EXPECT_NE(warning.find("using " + std::to_string(usable) + " thread"), std::string::npos)
      << warning;
}

// ---- values far from 1 -----------------------------------------------------------------

/// The same distributed tensor with every value times 2^e (exact).
template <typename T>
partition::Distributed<T> scaled(const partition::Distributed<double>& d, int e) {
  partition::Distributed<T> o;
  o.dist = d.dist;
  o.block = d.block.template cast<T>();
  for (std::size_t k = 0; k < o.block.vals.size(); ++k)
    o.block.vals[k] = static_cast<T>(std::ldexp(d.block.vals[k], e));
  return o;
}

partition::Distributed<double> lowrank(std::uint64_t seed) {
  algo::GenerateOptions g;
  g.dims = {30, 20, 10};
  g.nnz = 900;
  g.rank = 3;
  g.noise = 0.05;
  g.seed = seed;
  return algo::generate(g, world());
}

template <typename T>
algo::CpResult cp(const partition::Distributed<T>& d, BackendKind kind) {
  auto be = kernels::make_backend<T>(kind, 1);
  algo::CpOptions o;
  o.rank = 3;
  o.max_iters = 8;
  o.tol = 0;
  o.print_iterations = false;
  return algo::cp_als<T>(d, *be, world(), world(), o);
}

/// Relative 2-norm difference of two factor matrices.
double rel_diff(const Matrix<double>& a, const Matrix<double>& b) {
  double num = 0, den = 0;
  for (std::size_t k = 0; k < a.data.size(); ++k) {
    num += (a.data[k] - b.data[k]) * (a.data[k] - b.data[k]);
    den += a.data[k] * a.data[k];
  }
  return std::sqrt(num / den);
}

/// The model with unit 2-norm factor columns and the norms moved into lambda (the split
/// between lambda and the factors depends on the normalisation rule, the model does not).
KruskalModel normalised(KruskalModel m) {
  for (int r = 0; r < m.rank; ++r)
    for (auto& F : m.factors) {
      double s = 0;
      for (std::int64_t i = 0; i < F.rows; ++i) s += F(i, r) * F(i, r);
      s = std::sqrt(s);
      for (std::int64_t i = 0; i < F.rows; ++i) F(i, r) /= s;
      m.lambda[static_cast<std::size_t>(r)] *= s;
    }
  return m;
}

template <typename T>
void expect_cp_scale_invariant(int e, BackendKind kind, double tol) {
  const auto d = lowrank(11);
  const auto base = cp(scaled<T>(d, 0), kind);
  const auto far = cp(scaled<T>(d, e), kind);
  const std::string what = "2^" + std::to_string(e) + " on " + kernels::to_string(kind);
  ASSERT_EQ(far.history.size(), base.history.size()) << what;
  for (std::size_t i = 0; i < base.history.size(); ++i) {
    ASSERT_TRUE(std::isfinite(far.history[i].fit)) << what << " iteration " << i + 1;
    EXPECT_NEAR(far.history[i].fit, base.history[i].fit, tol) << what << " iteration " << i + 1;
  }
  EXPECT_GT(base.fit, 0.5) << what;
  EXPECT_NEAR(far.norm_x / std::ldexp(base.norm_x, e), 1.0, 1e-12) << what;
  const KruskalModel a = normalised(base.model), b = normalised(far.model);
  for (int r = 0; r < 3; ++r)
    EXPECT_NEAR(b.lambda[r] / std::ldexp(a.lambda[r], e), 1.0, 100 * tol)
        << what << " lambda " << r;
  for (int n = 0; n < 3; ++n)
    EXPECT_LT(rel_diff(a.factors[n], b.factors[n]), 100 * tol) << what << " factor " << n;
}

TEST_F(Harden, CpFitOfHugeAndTinyValuesEqualsTheFitNearOne) {
  for (BackendKind kind : {BackendKind::reference, BackendKind::cpu}) {
    expect_cp_scale_invariant<double>(664, kind, 1e-9);    // values near 1e200
    expect_cp_scale_invariant<double>(-664, kind, 1e-9);   // near 1e-200
    expect_cp_scale_invariant<double>(1000, kind, 1e-9);   // near 1e301
    expect_cp_scale_invariant<double>(-1000, kind, 1e-9);  // near 1e-301
    expect_cp_scale_invariant<float>(-100, kind, 1e-4);    // near 1e-30 in float
    expect_cp_scale_invariant<float>(100, kind, 1e-4);     // near 1e30 in float
  }
}

// Below those scales the MTTKRP's products of values and factor entries would be formed in
// the subnormal range (the loop's scale is applied to its output): refused, one message on
// every rank, not a wrong fit (a float tensor of values near 1e-37 gave 0.5996 for 0.5).
TEST_F(Harden, CpRefusesValuesTooSmallForItsPrecision) {
  const auto d = lowrank(11);
  auto refused = [&](auto tag, int e) {
    using T = decltype(tag);
    try {
      (void)cp(scaled<T>(d, e), BackendKind::cpu);
      ADD_FAILURE() << "2^" << e << " ran";
    } catch (const std::exception& ex) {
      const std::string m = ex.what();
      EXPECT_NE(m.find("too small for CP-ALS in"), std::string::npos) << m;
      EXPECT_NE(m.find(std::is_same_v<T, float> ? "--precision double" : "power of ten"),
                std::string::npos)
          << m;
    }
  };
  refused(float{}, -118);
  refused(double{}, -1030);
}

TEST_F(Harden, TuckerRefusesValuesTooSmallForItsPrecision) {
  const auto d = lowrank(12);
  auto refused = [&](auto tag, int e) {
    using T = decltype(tag);
    auto be = kernels::make_backend<T>(BackendKind::cpu, 1);
    algo::TuckerOptions o;
    o.ranks = {3, 3, 2};
    o.max_iters = 2;
    o.print_iterations = false;
    try {
      (void)algo::tucker_hooi<T>(scaled<T>(d, e), *be, world(), o);
      ADD_FAILURE() << "2^" << e << " ran";
    } catch (const std::exception& ex) {
      const std::string m = ex.what();
      EXPECT_NE(m.find("too small for Tucker-HOOI in"), std::string::npos) << m;
    }
  };
  refused(float{}, -118);
  refused(double{}, -1030);
}

TEST_F(Harden, TuckerFitOfHugeAndTinyValuesEqualsTheFitNearOne) {
  const auto d = lowrank(12);
  auto run = [&](int e) {
    auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
    algo::TuckerOptions o;
    o.ranks = {3, 3, 2};
    o.max_iters = 4;
    o.tol = 0;
    o.print_iterations = false;
    return algo::tucker_hooi<double>(scaled<double>(d, e), *be, world(), o);
  };
  const auto base = run(0);
  for (int e : {664, -664}) {
    const auto far = run(e);
    ASSERT_TRUE(std::isfinite(far.fit)) << e;
    EXPECT_NEAR(far.fit, base.fit, 1e-9) << e;
    EXPECT_NEAR(far.core_norm / std::ldexp(base.core_norm, e), 1.0, 1e-9) << e;
    ASSERT_EQ(far.model.core.size(), base.model.core.size());
    for (std::size_t k = 0; k < base.model.core.size(); ++k)
      EXPECT_NEAR(far.model.core[k], std::ldexp(base.model.core[k], e),
                  1e-7 * std::ldexp(base.core_norm, e))
          << e << " core " << k;
  }
}

TEST_F(Harden, ScaledNormOfValues) {
  SparseTensor<double> x({4});
  for (index_t i = 0; i < 4; ++i) x.push_back(&i, 0.5 + i);
  EXPECT_EQ(x.norm(), std::sqrt(x.norm_squared()));  // bitwise where nothing overflows
  for (int e : {700, -700, 1000, -1060}) {
    SparseTensor<double> y = x;
    for (auto& v : y.vals) v = std::ldexp(v, e);
    EXPECT_NEAR(y.norm() / std::ldexp(x.norm(), e), 1.0, 1e-14) << e;
  }
  auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
  SparseTensor<double> y = x;
  for (auto& v : y.vals) v = std::ldexp(v, 800);
  EXPECT_NEAR(be->prepare(y)->value_norm() / std::ldexp(x.norm(), 800), 1.0, 1e-14);
}

TEST_F(Harden, AllZeroTensorIsOneAgreedErrorNamingIt) {
  auto d = lowrank(13);
  for (auto& v : d.block.vals) v = 0;
  auto be = kernels::make_backend<double>(BackendKind::reference, 1);
  algo::CpOptions o;
  o.rank = 2;
  o.print_iterations = false;
  o.tensor_name = "zeros.tns";
  try {
    algo::cp_als<double>(d, *be, world(), world(), o);
    ADD_FAILURE() << "expected an error";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("zeros.tns: every value is 0"), std::string::npos)
        << e.what();
  }
}

TEST_F(Harden, ValuesSinglePrecisionCannotHoldAreRefusedWithTheLine) {
  const std::string text = "1 1 1 2.5\n2 2 2 3e38\n# big\n3 1 2 1e200\n";
  const std::string f = put("big.tns", text);
  io::TnsReadOptions o;
  EXPECT_EQ(io::read_tns(f, world(), o).global_nnz, 3);  // double: fine
  o.float_values = true;
  expect_read_error(
      f, o,
      {f + ":4: value: expected a number representable in single", "'1e200'", "--precision double"},
      world());
  const std::string tiny = put("tiny.tns", "1 1 1 1e-50\n");
  expect_read_error(tiny, o, {tiny + ":1: value:", "'1e-50'"}, world());
  // Stores: the first bad position.
  const std::string h = path("big.h5");
  SparseTensor<double> x({3, 3, 3});
  if (world().rank() == 0) {
    const index_t a[3] = {0, 0, 0}, b[3] = {1, 1, 1};
    x.push_back(a, 1.0);
    x.push_back(b, 1e200);
  }
  io::write_h5(h, x, world());
  EXPECT_EQ(io::read_h5(h, world()).global_nnz, 2);
  io::H5ReadOptions ho;
  ho.float_values = true;
  try {
    io::read_h5(h, world(), ho);
    ADD_FAILURE() << "expected an error";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("/values[1] = 1e+200"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--precision double"), std::string::npos) << e.what();
  }
}

// ---- gzip members and trailing data -----------------------------------------------------

TEST_F(Harden, DataAfterAGzipMemberIsAnErrorNamingItsByte) {
  const std::string m1 = gzip(tns_lines(0, 30)), m2 = gzip(tns_lines(30, 30));
  // Two members: one stream of 60 nonzeros.
  const std::string two = put("two.tns.gz", m1 + m2);
  for (std::size_t block : {std::size_t(0), std::size_t(7)}) {
    io::TnsReadOptions o;
    o.gz_block_bytes = block;
    o.chunk_bytes = block;
    EXPECT_EQ(io::read_tns(two, world(), o).global_nnz, 60);
  }
  // A member followed by plain text: the text is not dropped in silence.
  const std::string text = put("text.tns.gz", m1 + tns_lines(30, 30));
  expect_read_error(text, {},
                    {text + ": byte " + std::to_string(m1.size()) + ":",
                     "after the end of gzip member 1 are not a gzip member", "found '2 3 3 31"},
                    world());
  // Two members and then text; a single stray byte; zero padding.
  const std::string late = put("late.tns.gz", m1 + m2 + "x");
  expect_read_error(late, {},
                    {late + ": byte " + std::to_string(m1.size() + m2.size()) + ":",
                     "1 byte after the end of gzip member 2"},
                    world());
  const std::string pad = put("pad.tns.gz", m1 + std::string(512, '\0'));
  expect_read_error(pad, {}, {pad + ": byte " + std::to_string(m1.size()), "\\x00"}, world());
  // Truncation is still reported as before.
  const std::string cut = put("cut.tns.gz", m1.substr(0, m1.size() - 3));
  expect_read_error(cut, {}, {"corrupt or truncated gzip data (zlib: "}, world());
}

// ---- inputs that are not regular files ---------------------------------------------------

/// Runs f (which must throw InputError/CollectiveError naming `want`) on a thread and fails
/// if it takes more than 20 s; `unblock` is called then so the thread can end.
template <typename F, typename U>
void expect_prompt_refusal(F f, const std::string& want, U unblock) {
  auto fut = std::async(std::launch::async, [&] {
    try {
      f();
      return std::string("no error");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  });
  if (fut.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    unblock();
    ADD_FAILURE() << "blocked for 20 s instead of refusing (" << want << ")";
    fut.wait();
    return;
  }
  const std::string msg = fut.get();
  EXPECT_NE(msg.find(want), std::string::npos) << msg;
}

TEST_F(Harden, FifosDevicesAndFoldersAreRefusedNotWaitedOn) {
  comm::MpiCommunicator self(MPI_COMM_SELF);
  const std::string fifo = path("fifo" + std::to_string(world().rank()) + ".tns");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto unblock = [&] {  // a writer end lets a blocked open return
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  };
  expect_prompt_refusal([&] { io::read_tns(fifo, self); }, fifo + ": is a FIFO (named pipe)",
                        unblock);
  expect_prompt_refusal(
      [&] {
        if (io::is_tensor_store(fifo, self)) throw std::runtime_error("a FIFO is not a store");
        throw std::runtime_error("checked");
      },
      "checked", unblock);
  const std::string fifo_h5 = path("fifo" + std::to_string(world().rank()) + ".h5");
  ASSERT_EQ(::mkfifo(fifo_h5.c_str(), 0600), 0);
  expect_prompt_refusal([&] { io::read_h5(fifo_h5, self); }, fifo_h5 + ": is a FIFO",
                        [&] {
                          const int w = ::open(fifo_h5.c_str(), O_WRONLY | O_NONBLOCK);
                          if (w >= 0) ::close(w);
                        });
  expect_prompt_refusal([&] { io::read_tns("/dev/null", self); },
                        "/dev/null: is a character device", [] {});
  expect_prompt_refusal([&] { io::read_tns(dir_, self); }, dir_ + ": is a directory", [] {});
}

// ---- dims of 2^32 ----------------------------------------------------------------------

TEST_F(Harden, StoreWithDimsOfTwoToThe32IsRefusedByThePlanner) {
  const std::string h = path("huge.h5");
  SparseTensor<double> x({std::uint64_t(1) << 32, std::uint64_t(1) << 32, 4});
  if (world().rank() == 0) {
    const index_t a[3] = {0, 7, 1}, b[3] = {4294967295u, 3, 2};
    x.push_back(a, 1.0);
    x.push_back(b, 2.0);
  }
  io::H5Header meta;
  meta.dims = x.dims;
  io::write_h5(h, x, world(), meta);
  const plan::TensorFacts t = plan::facts_of_file(h, world());
  ASSERT_EQ(t.dims[0], std::uint64_t(1) << 32);
  plan::Request req;
  req.cp_rank = 4;
  req.value_bytes = 8;
  req.ranks = world().size();
  plan::Limits lim;
  lim.host = {std::uint64_t(64) << 30, "test host limit"};
  lim.disk = {std::uint64_t(1) << 40, "test disk"};
  const plan::Plan p = plan::make_plan(req, t, lim);
  EXPECT_FALSE(p.fits);
  for (const char* part : {"no memory tier fits ", "mode 0 has 4294967296 rows",
                           "(4294967296 x 4, double) alone takes 128.00 GiB", "test host limit"})
    EXPECT_NE(p.refusal.find(part), std::string::npos) << part << "\n" << p.refusal;
  EXPECT_NE(p.refusal.find(h), std::string::npos) << p.refusal;
}

// ---- the first failing rank -------------------------------------------------------------

TEST(FirstFailure, ExactlyOneRankClaimsFirst) {
  const auto& w = world();
  comm::FirstFailure f(MPI_COMM_WORLD);
  // Every rank but 0 fails, while rank 0 waits in a collective.
  bool mine = false;
  if (w.rank() != 0 || w.size() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50 * w.rank()));
    const auto t0 = std::chrono::steady_clock::now();
    mine = f.claim(10.0);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 5.0) << "a claim waited on rank 0";
    EXPECT_EQ(f.claim(), mine);  // asked again: the same answer
  }
  w.barrier();
  int firsts = mine ? 1 : 0;
  w.allreduce(&firsts, 1);
  EXPECT_EQ(firsts, 1);
  if (w.size() > 1) {
    EXPECT_EQ(f.claims(), w.size() - 1);
  }
  w.barrier();
}

}  // namespace
}  // namespace tessera

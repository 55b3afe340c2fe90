// SpTC output in pieces (algo::contract, docs/sptc.md "Pieces"): a memory limit between
// the resident part (inputs, routed copies, matching workspace) and the one-piece peak
// forces k > 1 output pieces, kept in memory or handed to a sink; the result is the same
// set of coordinates and values (to rounding) as the one-piece run, on the reference and
// cpu backends, for a self-contraction and an X x Y contraction; the measured peak (VmHWM)
// stays under the planned one; a limit under the resident part is refused with one message.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "algo/contract.hpp"
#include "comm/mpi_communicator.hpp"
#include "kernels/backend.hpp"
#include "kernels/sptc.hpp"
#include "plan/limits.hpp"
#include "plan/planner.hpp"

namespace tessera {
namespace {

comm::MpiCommunicator& world() {
  static comm::MpiCommunicator w(MPI_COMM_WORLD);
  return w;
}

/// This rank's share (every P-th nonzero) of a random tensor, the same on every rank.
SparseTensor<double> random_share(const std::vector<std::uint64_t>& dims, int nnz,
                                  std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  SparseTensor<double> t(dims);
  const int P = world().size(), r = world().rank();
  for (int k = 0; k < nnz; ++k) {
    std::vector<index_t> co(dims.size());
    for (std::size_t m = 0; m < dims.size(); ++m) co[m] = static_cast<index_t>(rng() % dims[m]);
    const double v = static_cast<double>(rng() % 19) - 9.0;
    if (k % P != r) continue;
    for (std::size_t m = 0; m < dims.size(); ++m) t.idx[m].push_back(co[m]);
    t.vals.push_back(v);
  }
  return t;
}

using Map = std::map<std::vector<index_t>, double>;
Map as_map(const SparseTensor<double>& t) {
  Map m;
  for (nnz_t k = 0; k < t.nnz(); ++k) {
    std::vector<index_t> co;
    for (int d = 0; d < t.order(); ++d) co.push_back(t.idx[static_cast<std::size_t>(d)][k]);
    m[co] = t.vals[k];
  }
  return m;
}

void expect_same(const Map& a, const Map& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [co, v] : a) {
    auto it = b.find(co);
    ASSERT_NE(it, b.end());
    EXPECT_NEAR(it->second, v, 1e-9 * (1 + std::abs(v)));
  }
}

/// Collects the pieces as a streaming sink (memory holds what it keeps: here all of them).
struct CollectSink final : algo::ContractPieceSink<double> {
  std::vector<SparseTensor<double>> got;
  void put(SparseTensor<double>&& share, int piece) override {
    EXPECT_EQ(piece, static_cast<int>(got.size()));
    got.push_back(std::move(share));
  }
};

struct Case {
  const char* spec;
  bool self;
};

void run_case(kernels::BackendKind kind, const Case& cs) {
  auto be = kernels::make_backend<double>(kind, 1);
  const auto spec = kernels::parse_contract_spec(cs.spec);
  const auto x = random_share({300, 40, 6}, 6000, 11);
  const auto y = cs.self ? SparseTensor<double>() : random_share({40, 6, 250}, 6000, 12);
  const SparseTensor<double>& Y = cs.self ? x : y;
  algo::ContractOptions o;
  o.print = false;
  const auto one = algo::contract(x, Y, spec, *be, world(), o);
  ASSERT_EQ(one.pieces, 1);
  const Map ref = as_map(algo::gather(one.local, world()));
  const auto& pp = one.piece_plan;
  // Kept in memory: the kept output counts against the limit for every piece, so this
  // sink saves host memory only on the exchange; the pieces are asked for (min_pieces).
  o.min_pieces = 3;
  const auto kept = algo::contract(x, Y, spec, *be, world(), o);
  EXPECT_GE(kept.pieces, 3);
  expect_same(ref, as_map(algo::gather(kept.local, world())));
  o.min_pieces = 0;
  // Streamed to a sink, forced by a limit between the resident part and the one-piece
  // peak: the pieces are ascending ranges of output mode 0 on every rank.
  ASSERT_GT(pp.one_piece_host_bytes, pp.resident_bytes);
  o.memory_limit = pp.resident_bytes + (pp.one_piece_host_bytes - pp.resident_bytes) / 2;
  o.memory_limit_source = "test limit";
  CollectSink sink;
  plan::reset_peak_rss();
  const std::uint64_t rss0 = plan::process_memory().rss;
  const auto streamed = algo::contract<double>(x, Y, spec, *be, world(), o, nullptr, &sink);
  const std::uint64_t hwm = plan::process_memory().hwm;
  EXPECT_TRUE(streamed.streamed);
  EXPECT_GT(streamed.pieces, 1) << streamed.piece_plan.reason;
  EXPECT_LE(streamed.piece_plan.host_bytes, o.memory_limit);
  // Measured against planned: the baseline (inputs included) plus the plan's data beyond
  // the inputs plus the planner's slack. (The sink here keeps the pieces: add them.)
  if (hwm > 0) {
    EXPECT_LE(hwm, rss0 + streamed.piece_plan.host_bytes - streamed.memory.input_bytes +
                       one.local.nnz() * 16 + plan::kHostSlackBytes);
  }
  EXPECT_EQ(static_cast<int>(sink.got.size()), streamed.pieces);
  EXPECT_EQ(streamed.local.nnz(), 0u);
  SparseTensor<double> all(one.dims);
  index_t last0 = 0;
  for (const auto& p : sink.got) {
    for (nnz_t k = 0; k < p.nnz(); ++k) {
      EXPECT_GE(p.idx[0][k], last0);  // pieces in ascending order of output mode 0
      last0 = p.idx[0][k];
      for (int d = 0; d < p.order(); ++d)
        all.idx[static_cast<std::size_t>(d)].push_back(p.idx[static_cast<std::size_t>(d)][k]);
      all.vals.push_back(p.vals[k]);
    }
  }
  expect_same(ref, as_map(algo::gather(all, world())));
  EXPECT_EQ(streamed.global_nnz, one.global_nnz);
  // Too small for the inputs: refused with one message naming the limit and its source.
  o.memory_limit = pp.resident_bytes / 2;
  try {
    algo::contract(x, Y, spec, *be, world(), o);
    ADD_FAILURE() << "no refusal";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("over the limit of"), std::string::npos) << m;
    EXPECT_NE(m.find("test limit"), std::string::npos) << m;
    EXPECT_NE(m.find("stay resident"), std::string::npos) << m;
    EXPECT_EQ(m.find("over the limit of"), m.rfind("over the limit of")) << m;
  }
}

TEST(ContractPieces, SelfContractionReference) {
  run_case(kernels::BackendKind::reference, {"ijy,kjy->ik", true});
}
TEST(ContractPieces, SelfContractionCpu) {
  run_case(kernels::BackendKind::cpu, {"ijy,kjy->ik", true});
}
TEST(ContractPieces, TwoInputsReference) {
  run_case(kernels::BackendKind::reference, {"ijk,jkl->li", false});
}
TEST(ContractPieces, TwoInputsCpu) {
  run_case(kernels::BackendKind::cpu, {"ijk,jkl->il", false});
}

/// The pure model: one piece reproduces the sum of its parts; more pieces need less.
TEST(ContractPiecesModel, PiecesAndRefusal) {
  plan::ContractCounts c;
  c.input_bytes = 1000;
  c.workspace_bytes = 2000;
  c.output_entries = 10000;
  c.entry_bytes = 16;
  c.output_bytes = 160000;
  c.global_output_entries = 10000;
  c.send_entry_bytes = 8;
  c.split_bytes = 1000;
  EXPECT_EQ(plan::contract_host_bytes(c, 1, plan::ContractSinkKind::stream), 163000u);
  plan::ContractLimits lim;
  lim.host = {50000, "--mem-limit 50000"};
  const auto p = plan::plan_contract_pieces(c, lim, plan::ContractSinkKind::stream);
  ASSERT_TRUE(p.fits) << p.reason;
  EXPECT_EQ(p.pieces, 4);  // 1000 + 250 + 2000 + 40000 = 43250; 3 pieces: 56667
  EXPECT_LE(p.host_bytes, 50000u);
  lim.host = {2500, "--mem-limit 2500"};
  const auto r = plan::plan_contract_pieces(c, lim, plan::ContractSinkKind::stream);
  EXPECT_FALSE(r.fits);
  EXPECT_NE(r.reason.find("--mem-limit 2500"), std::string::npos) << r.reason;
  // Only the device short (cuda): pieces kept in host memory.
  c.device = true;
  lim.host = {};
  lim.device = {100000, "free device memory"};
  const auto d = plan::plan_contract_pieces(c, lim, plan::ContractSinkKind::memory);
  ASSERT_TRUE(d.fits) << d.reason;
  EXPECT_TRUE(d.device_short);
  EXPECT_FALSE(d.host_short);
  EXPECT_EQ(d.pieces, 2);
  EXPECT_LE(d.device_bytes, 100000u);
}

}  // namespace
}  // namespace tessera

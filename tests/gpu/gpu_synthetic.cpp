// Backend::prepare_synthetic on the CUDA backend (the COO generated on the device, then
// the device sort) against prepare() of the same tensor built on the host, serially,
// from tensor/synthetic.hpp, on the reference backend: the MTTKRP of every mode and
// distinct_rows() must agree. Uniform and power-law indices, orders 3 and 4, R 16 and
// 32, id ranges with count 0 and 1, a mode of length 1 and sort keys over 32 bits. The
// fallbacks (device sort over the limit: COO on the host, host sort; tier 2) are checked
// the same way. Skips (with a message) where no CUDA device is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/backend.hpp"
#include "tensor/synthetic.hpp"
#include "util/error.hpp"
#include "util/relabel.hpp"
#include "util/rng.hpp"

namespace tessera::kernels {
namespace {

using namespace ::tessera::test;

synthetic::Spec make_spec(const std::vector<std::uint64_t>& dims, bool powerlaw) {
  synthetic::Spec s;
  s.order = static_cast<int>(dims.size());
  for (int n = 0; n < s.order; ++n) s.dims[n] = dims[static_cast<std::size_t>(n)];
  s.powerlaw = powerlaw;
  s.alpha = 2.0;
  s.rank = 4;
  s.seed = 1;
  return s;
}

/// The tensor prepare_synthetic stands for, built serially here (no backend code).
template <typename T>
SparseTensor<T> host_tensor(const synthetic::Spec& s, std::uint64_t first, std::uint64_t count) {
  SparseTensor<T> x(std::vector<std::uint64_t>(s.dims, s.dims + s.order));
  x.reserve(static_cast<std::size_t>(count));
  index_t c[kMaxOrder];
  for (std::uint64_t id = first; id < first + count; ++id) {
    for (int n = 0; n < s.order; ++n) c[n] = synthetic::coordinate(s, id, n);
    x.push_back(c, static_cast<T>(synthetic::model_value(s, c)));
  }
  return x;
}

template <typename T>
std::vector<std::uint64_t> count_distinct(const SparseTensor<T>& x) {
  std::vector<std::uint64_t> out(static_cast<std::size_t>(x.order()), 0);
  for (int n = 0; n < x.order(); ++n) {
    std::vector<char> seen(static_cast<std::size_t>(x.dims[n]), 0);
    for (index_t i : x.idx[n])
      if (!seen[i]) {
        seen[i] = 1;
        ++out[static_cast<std::size_t>(n)];
      }
  }
  return out;
}

template <typename T>
class GpuSynthetic : public GpuVsReference<T> {
 protected:
  /// As GpuVsReference::check_mttkrp, after checking the handle's shape.
  void check_mttkrp(Backend<T>& be, const TensorHandle<T>& h, const SparseTensor<T>& x, int R,
                    std::uint64_t seed, const std::string& what) {
    ASSERT_EQ(h.order(), x.order());
    ASSERT_EQ(h.nnz(), x.nnz()) << what;
    EXPECT_EQ(h.dims(), x.dims) << what;
    GpuVsReference<T>::check_mttkrp(be, h, x, R, seed, what);
  }

  /// prepare_synthetic(spec, first, count) on a fresh cuda backend (budget 0: automatic)
  /// against the host-built tensor: MTTKRP at every R, distinct_rows.
  void check(const synthetic::Spec& spec, std::uint64_t first, std::uint64_t count,
             const std::vector<int>& ranks, std::size_t budget = 0,
             const std::string& expect_in_describe = "") {
    const auto x = host_tensor<T>(spec, first, count);
    auto be = make_backend<T>(BackendKind::cuda);
    if (budget) be->set_memory_budget(budget);
    auto h = be->prepare_synthetic(spec, first, count);
    const std::string d = h->describe();
    const std::string what = std::string(spec.powerlaw ? "power-law" : "uniform") + " ids [" +
                             std::to_string(first) + ", +" + std::to_string(count) + ")";
    if (count > 0 && !expect_in_describe.empty()) {
      EXPECT_TRUE(contains(d, expect_in_describe)) << what << ": " << d;
    }
    EXPECT_EQ(h->distinct_rows(), count_distinct(x)) << what << "; " << d;
    EXPECT_EQ(h->distinct_rows(), this->ref_->prepare(x)->distinct_rows()) << what;
    for (int R : ranks) check_mttkrp(*be, *h, x, R, first + count + R, what);
  }
};

using ValueTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GpuSynthetic, ValueTypes);

const std::vector<std::pair<std::uint64_t, std::uint64_t>> kRanges = {
    {0, 0}, {0, 1}, {12345, 1}, {0, 5000}, {777777, 20001}, {std::uint64_t(1) << 40, 3000}};

TYPED_TEST(GpuSynthetic, Order3) {
  for (bool pl : {false, true}) {
    const auto spec = make_spec({300, 200, 5000}, pl);
    for (const auto& [first, count] : kRanges)
      this->check(spec, first, count, {16, 32}, 0, "generated and sorted on the device");
  }
}

TYPED_TEST(GpuSynthetic, Order4WithAModeOfLengthOne) {
  for (bool pl : {false, true}) {
    const auto spec = make_spec({1000, 1, 70000, 37}, pl);
    for (const auto& [first, count] : kRanges)
      this->check(spec, first, count, {16, 32}, 0, "generated and sorted on the device");
  }
}

// Keys over 32 bits (22 + 22 bits for mode 2), the amazon-reviews shape scaled down.
TYPED_TEST(GpuSynthetic, WideKeys) {
  for (bool pl : {false, true}) {
    this->check(make_spec({3000000, 40, 2500000}, pl), 99, 50000, {16}, 0,
                "generated and sorted on the device");
    this->check(make_spec({4821207, 1774269, 1805187}, pl), 1000000, 30000, {16}, 0,
                "generated and sorted on the device");
  }
}

// Fallbacks: a budget of exactly the tier-1 bytes (under the device sort's peak): the
// COO is built on the host and sorted there; a quarter of that: tier 2.
TYPED_TEST(GpuSynthetic, Fallbacks) {
  using T = TypeParam;
  for (bool pl : {false, true}) {
    const auto spec = make_spec({300, 200, 5000, 64}, pl);
    const std::uint64_t first = 4242, count = 20001;
    const int N = spec.order;
    const std::size_t copy = chunk_bytes<T>(N, count);  // one sorted copy
    this->check(spec, first, count, {16, 32}, N * copy, "generated on the host");
    this->check(spec, first, count, {16, 32}, N * copy, "sorted on the host");
    auto be = make_backend<T>(BackendKind::cuda);
    be->set_memory_budget(N * copy / 4);
    EXPECT_EQ(be->prepare_synthetic(spec, first, count)->tier(), 2);
    this->check(spec, first, count, {32}, N * copy / 4, "generated on the host");
  }
}

// Windows (one grid rank's block, relabelled or not, coordinates shifted to it): the two
// device passes (count per block of ids, then write in id order) against the same filter
// written out here, and against the host path (make_synthetic_tensor with the window) when
// the budget sends it there. Ranges over several blocks of 8192 ids, and an empty window.
TYPED_TEST(GpuSynthetic, Windows) {
  using T = TypeParam;
  for (bool pl : {false, true})
    for (bool relabel : {false, true})
      for (const std::vector<std::uint64_t>& lohi :
           {std::vector<std::uint64_t>{0, 150, 0, 200, 0, 5000},
            {150, 300, 50, 200, 0, 5000},
            {7, 7, 0, 200, 0, 5000}}) {
        const auto spec = make_spec({300, 200, 5000}, pl);
        synthetic::Window w;
        w.relabelled = relabel;
        for (int n = 0; n < 3; ++n) {
          w.lo[n] = lohi[static_cast<std::size_t>(2 * n)];
          w.hi[n] = lohi[static_cast<std::size_t>(2 * n + 1)];
          if (relabel) w.relabel[n] = Relabel(11, n, spec.dims[n]);
        }
        const std::uint64_t first = 333, count = 70001;
        const std::vector<std::uint64_t> dims{w.hi[0] - w.lo[0], w.hi[1] - w.lo[1], 5000};
        const auto x = window_reference<T>(spec, w, first, count);
        const std::string what = std::string(pl ? "power-law" : "uniform") +
                                 (relabel ? " relabelled" : "") + " window from " +
                                 std::to_string(w.lo[0]) + "," + std::to_string(w.lo[1]);
        for (std::size_t budget : {std::size_t(0), 3 * chunk_bytes<T>(3, x.nnz())}) {
          auto be = make_backend<T>(BackendKind::cuda);
          if (budget) be->set_memory_budget(budget);
          auto h = be->prepare_synthetic(spec, w, first, count);
          const std::string d = h->describe();
          if (x.nnz() > 0) {
            EXPECT_TRUE(contains(d, budget ? "generated on the host"
                                           : "generated (a window) and sorted on the device"))
                << what << ": " << d;
          }
          EXPECT_EQ(h->distinct_rows(), count_distinct(x)) << what;
          if (x.dims[0] == 0) {  // the empty window: no rows to multiply
            EXPECT_EQ(h->nnz(), 0) << what;
            EXPECT_EQ(h->dims(), dims) << what;
            continue;
          }
          this->check_mttkrp(*be, *h, x, 16, 5, what + (budget ? ", host path" : ""));
        }
      }
}

TYPED_TEST(GpuSynthetic, InvalidSpec) {
  using T = TypeParam;
  auto be = make_backend<T>(BackendKind::cuda);
  auto spec = make_spec({10, 20}, false);
  spec.dims[1] = 0;
  EXPECT_THROW(be->prepare_synthetic(spec, 0, 10), InputError);
  spec = make_spec({10, 20}, false);
  EXPECT_THROW(be->prepare_synthetic(spec, ~std::uint64_t(0) - 5, 10), InputError);
}

}  // namespace
}  // namespace tessera::kernels

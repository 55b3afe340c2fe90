// compute_stats / format_stats on small tensors with known answers.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tensor/stats.hpp"

namespace tessera {
namespace {

SparseTensor<double> known_tensor(std::vector<std::uint64_t> dims) {
  // 5 nonzeros in a 3 x 4 x 2 (or larger) tensor:
  //   (0,0,0)=1  (0,1,1)=-2  (0,3,0)=4  (2,1,0)=0.5  (2,1,1)=2
  SparseTensor<double> x(std::move(dims));
  const index_t c[5][3] = {{0, 0, 0}, {0, 1, 1}, {0, 3, 0}, {2, 1, 0}, {2, 1, 1}};
  const double v[5] = {1, -2, 4, 0.5, 2};
  for (int k = 0; k < 5; ++k) x.push_back(c[k], v[k]);
  return x;
}

TEST(IoStats, KnownTensor) {
  const TensorStats s = compute_stats(known_tensor({3, 4, 2}));
  EXPECT_EQ(s.order, 3);
  EXPECT_EQ(s.dims, (std::vector<std::uint64_t>{3, 4, 2}));
  EXPECT_EQ(s.nnz, 5);
  EXPECT_DOUBLE_EQ(s.density, 5.0 / 24.0);
  EXPECT_EQ(s.min_value, -2.0);
  EXPECT_EQ(s.max_value, 4.0);
  EXPECT_DOUBLE_EQ(s.norm, std::sqrt(1 + 4 + 16 + 0.25 + 4));
  ASSERT_EQ(s.modes.size(), 3u);
  // mode 1: slices 0 (3 nnz) and 2 (2 nnz); slice 1 empty.
  EXPECT_EQ(s.modes[0].dim, 3u);
  EXPECT_EQ(s.modes[0].nonempty_slices, 2u);
  EXPECT_EQ(s.modes[0].max_slice_nnz, 3);
  EXPECT_DOUBLE_EQ(s.modes[0].mean_slice_nnz, 2.5);
  // mode 2: slices 0 (1), 1 (3), 3 (1).
  EXPECT_EQ(s.modes[1].nonempty_slices, 3u);
  EXPECT_EQ(s.modes[1].max_slice_nnz, 3);
  EXPECT_DOUBLE_EQ(s.modes[1].mean_slice_nnz, 5.0 / 3.0);
  // mode 3: slices 0 (3), 1 (2).
  EXPECT_EQ(s.modes[2].nonempty_slices, 2u);
  EXPECT_EQ(s.modes[2].max_slice_nnz, 3);
  EXPECT_DOUBLE_EQ(s.modes[2].mean_slice_nnz, 2.5);
}

TEST(IoStats, LongModesUseTheSortedPathWithTheSameAnswer) {
  // Mode lengths far above the nonzero count take the sort-based slice count.
  const TensorStats a = compute_stats(known_tensor({3, 4, 2}));
  const TensorStats b = compute_stats(known_tensor({3, std::uint64_t(1) << 32, 1u << 30}));
  for (std::size_t m = 0; m < 3; ++m) {
    EXPECT_EQ(a.modes[m].nonempty_slices, b.modes[m].nonempty_slices) << m;
    EXPECT_EQ(a.modes[m].max_slice_nnz, b.modes[m].max_slice_nnz) << m;
    EXPECT_DOUBLE_EQ(a.modes[m].mean_slice_nnz, b.modes[m].mean_slice_nnz) << m;
  }
  EXPECT_EQ(b.modes[1].dim, std::uint64_t(1) << 32);
  EXPECT_DOUBLE_EQ(b.density, 5.0 / (3.0 * 4294967296.0 * 1073741824.0));
}

TEST(IoStats, EmptyTensor) {
  const TensorStats s = compute_stats(SparseTensor<double>({7, 9}));
  EXPECT_EQ(s.nnz, 0);
  EXPECT_EQ(s.density, 0.0);
  EXPECT_EQ(s.norm, 0.0);
  EXPECT_EQ(s.min_value, 0.0);
  EXPECT_EQ(s.max_value, 0.0);
  ASSERT_EQ(s.modes.size(), 2u);
  EXPECT_EQ(s.modes[1].dim, 9u);
  EXPECT_EQ(s.modes[1].nonempty_slices, 0u);
  EXPECT_EQ(s.modes[1].max_slice_nnz, 0);
  EXPECT_EQ(s.modes[1].mean_slice_nnz, 0.0);
}

TEST(IoStats, CoordinateOutsideDimsIsAnError) {
  SparseTensor<double> x = known_tensor({3, 4, 2});
  x.dims[1] = 3;  // coordinate 3 in mode 2 no longer fits
  EXPECT_THROW(compute_stats(x), Error);
}

TEST(IoStats, FormatIsReadable) {
  const std::string t = format_stats(compute_stats(known_tensor({3, 4, 2})));
  EXPECT_NE(t.find("order    3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("dims     3x4x2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("nnz      5\n"), std::string::npos) << t;
  EXPECT_NE(t.find("density  0.2083\n"), std::string::npos) << t;
  EXPECT_NE(t.find("min -2, max 4"), std::string::npos) << t;
  EXPECT_NE(t.find("norm     5.02494"), std::string::npos) << t;
  // One row per mode: index, length, non-empty slices (share), max, mean.
  EXPECT_NE(t.find("2 (67%)"), std::string::npos) << t;
  EXPECT_NE(t.find("3 (75%)"), std::string::npos) << t;
  EXPECT_NE(t.find("2.50"), std::string::npos) << t;
  EXPECT_NE(t.find("1.67"), std::string::npos) << t;
  EXPECT_EQ(t.back(), '\n');
}

}  // namespace
}  // namespace tessera

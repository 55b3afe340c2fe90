// The NCCL communicator against the MPI communicator: every collective on the same data,
// on device buffers, at 1 and 2 ranks. Every rank skips together when the job has no
// GPU for every rank (fewer GPUs than ranks on a host, or none at all).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "comm/nccl_communicator.hpp"
#include "gpu_test_util.hpp"
#include "kernels/backend.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace tessera::comm {
namespace {

using namespace ::tessera::test;

/// Rank-dependent values that every reduction reproduces exactly (small integers, so sums
/// are exact in every type and independent of the reduction order).
template <typename T>
std::vector<T> rank_data(std::size_t n, std::uint64_t seed, int rank) {
  CounterRng rng(seed, static_cast<std::uint64_t>(rank) + 1);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(rng.next_u64() % 50);
  return v;
}

/// Calls f.template operator()<T>() for every element type of the interface.
template <typename F>
void for_each_type(F&& f) {
  f.template operator()<std::int32_t>();
  f.template operator()<std::int64_t>();
  f.template operator()<std::uint32_t>();
  f.template operator()<std::uint64_t>();
  f.template operator()<float>();
  f.template operator()<double>();
  f.template operator()<std::uint8_t>();
}

using NcclTest = GpuJobTest;

TEST_F(NcclTest, Identity) {
  EXPECT_TRUE(nccl_available());
  EXPECT_EQ(nccl_->rank(), rank());
  EXPECT_EQ(nccl_->size(), size());
  EXPECT_EQ(nccl_->memory_space(), MemorySpace::device);
  EXPECT_EQ(nccl_->name(), "nccl");
  EXPECT_NO_THROW(nccl_->barrier());
  int device = -1;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(device, local_rank(*world_) % visible_devices());
}

TEST_F(NcclTest, Allreduce) {
  for_each_type([&]<typename T>() {
    for (std::size_t n : {std::size_t(1), std::size_t(1000), std::size_t(1) << 20}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
        auto h = rank_data<T>(n, 10 + static_cast<int>(op), rank());
        DeviceVector<T> d(h);
        nccl_->allreduce(d.data(), n, op);
        world_->allreduce(h.data(), n, op);
        EXPECT_EQ(d.host(), h) << "type size " << sizeof(T) << " n " << n << " op "
                               << static_cast<int>(op);
      }
    }
  });
}

TEST_F(NcclTest, HostScalarsAreStaged) {
  // allreduce_value passes a host pointer; the communicator stages it through the device.
  const double v = 1.5 + rank();
  EXPECT_EQ(nccl_->allreduce_value(v), world_->allreduce_value(v));
  const std::int64_t m = 100 - rank();
  EXPECT_EQ(nccl_->allreduce_value(m, ReduceOp::min), world_->allreduce_value(m, ReduceOp::min));
  std::vector<float> h = rank_data<float>(300, 3, rank()), want = h;
  nccl_->allreduce(h.data(), h.size());
  world_->allreduce(want.data(), want.size());
  EXPECT_EQ(h, want);
}

TEST_F(NcclTest, ReduceScatter) {
  for_each_type([&]<typename T>() {
    for (std::size_t count : {std::size_t(1), std::size_t(777)}) {
      const std::size_t total = count * static_cast<std::size_t>(size());
      const auto h = rank_data<T>(total, 20, rank());
      std::vector<T> want(count);
      world_->reduce_scatter(h.data(), want.data(), count);
      DeviceVector<T> send(h), recv(std::vector<T>(count, T(99)));
      nccl_->reduce_scatter(send.data(), recv.data(), count);
      EXPECT_EQ(recv.host(), want) << "count " << count;
      // In place: the result lands in this rank's block of the send buffer.
      DeviceVector<T> inplace(h);
      nccl_->reduce_scatter(inplace.data(), inplace.data() + count * rank(), count);
      const auto got = inplace.host();
      EXPECT_EQ(std::vector<T>(got.begin() + count * rank(), got.begin() + count * (rank() + 1)),
                want);
    }
  });
}

TEST_F(NcclTest, Allgather) {
  for_each_type([&]<typename T>() {
    const std::size_t count = 513;
    const auto mine = rank_data<T>(count, 30, rank());
    std::vector<T> want(count * size());
    world_->allgather(mine.data(), want.data(), count);
    DeviceVector<T> send(mine), recv(std::vector<T>(count * size(), T(7)));
    nccl_->allgather(send.data(), recv.data(), count);
    EXPECT_EQ(recv.host(), want);
    // In place: send is this rank's block of recv.
    std::vector<T> h(count * size(), T(7));
    std::copy(mine.begin(), mine.end(), h.begin() + count * rank());
    DeviceVector<T> inplace(h);
    nccl_->allgather(inplace.data() + count * rank(), inplace.data(), count);
    EXPECT_EQ(inplace.host(), want);
  });
}

TEST_F(NcclTest, Broadcast) {
  for_each_type([&]<typename T>() {
    for (int root = 0; root < size(); ++root) {
      auto h = rank_data<T>(1001, 40 + root, rank());
      DeviceVector<T> d(h);
      nccl_->broadcast(d.data(), h.size(), root);
      world_->broadcast(h.data(), h.size(), root);
      EXPECT_EQ(d.host(), h) << "root " << root;
    }
  });
}

TEST_F(NcclTest, Alltoallv) {
  for_each_type([&]<typename T>() {
    const int p = size();
    // Counts from (sender, receiver), zero for some pairs; a gap of 3 elements between
    // blocks on both sides, which must keep its contents.
    auto count = [](int from, int to) -> std::int64_t { return ((from * 7 + to * 3) % 5) * 11; };
    std::vector<std::int64_t> sc(p), sd(p), rc(p), rd(p);
    std::int64_t so = 0, ro = 0;
    for (int q = 0; q < p; ++q) {
      sc[q] = count(rank(), q);
      rc[q] = count(q, rank());
      sd[q] = so;
      rd[q] = ro;
      so += sc[q] + 3;
      ro += rc[q] + 3;
    }
    const auto send = rank_data<T>(static_cast<std::size_t>(so), 50, rank());
    std::vector<T> want(static_cast<std::size_t>(ro), T(5));
    world_->alltoallv_raw(send.data(), sc.data(), sd.data(), want.data(), rc.data(), rd.data(),
                          data_type_of<T>());
    DeviceVector<T> ds(send), dr(std::vector<T>(static_cast<std::size_t>(ro), T(5)));
    nccl_->alltoallv_raw(ds.data(), sc.data(), sd.data(), dr.data(), rc.data(), rd.data(),
                         data_type_of<T>());
    EXPECT_EQ(dr.host(), want);
  });
}

TEST_F(NcclTest, Split) {
  const int color = rank() % 2, key = size() - rank();  // reversed order inside a color
  auto sub = nccl_->split(color, key);
  auto msub = world_->split(color, key);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), msub->size());
  EXPECT_EQ(sub->rank(), msub->rank());
  EXPECT_EQ(sub->memory_space(), MemorySpace::device);
  auto h = rank_data<double>(4096, 60, rank());
  DeviceVector<double> d(h);
  sub->allreduce(d.data(), h.size());
  msub->allreduce(h.data(), h.size());
  EXPECT_EQ(d.host(), h);
  // The parent still works after the split.
  auto g = rank_data<std::int32_t>(64, 61, rank());
  DeviceVector<std::int32_t> dg(g);
  nccl_->allreduce(dg.data(), g.size(), ReduceOp::max);
  world_->allreduce(g.data(), g.size(), ReduceOp::max);
  EXPECT_EQ(dg.host(), g);
}

TEST_F(NcclTest, OrderedAfterBackendWork) {
  // The CUDA backend's fill is asynchronous on its own stream; the collective enqueued
  // right after must see its result without an explicit synchronize().
  auto backend = kernels::make_backend<double>(kernels::BackendKind::cuda);
  const std::size_t n = std::size_t(1) << 24;
  auto a = backend->allocate(n);
  backend->fill(a.data(), n, 1.0 + rank());
  nccl_->allreduce(a.data(), n);
  std::vector<double> h(n);
  backend->download(a.data(), n, h.data());
  const double want = size() * (size() + 1) / 2.0;
  EXPECT_EQ(std::count(h.begin(), h.end(), want), static_cast<std::ptrdiff_t>(n));
}

}  // namespace
}  // namespace tessera::comm

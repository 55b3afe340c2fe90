// ranks_on_node across ranks (plan_limits_mpi_np2): every rank of a one-host test run shares
// the node, and a split communicator counts only its own ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>

#include "comm/mpi_communicator.hpp"
#include "plan/limits.hpp"

namespace tessera::plan {
namespace {

TEST(PlanLimitsMpi, RanksOnNodeCountsTheRanksOfThisHost) {
  const comm::MpiCommunicator world(MPI_COMM_WORLD);
  // Test runs start every rank on this one machine.
  EXPECT_EQ(ranks_on_node(world), world.size());

  // Ranks split by parity: each half sees only its own members on the node.
  const std::unique_ptr<comm::Communicator> half = world.split(world.rank() % 2, world.rank());
  const auto* mpi_half = dynamic_cast<const comm::MpiCommunicator*>(half.get());
  ASSERT_NE(mpi_half, nullptr);
  EXPECT_EQ(ranks_on_node(*mpi_half), (world.size() + 1 - world.rank() % 2) / 2);
  EXPECT_EQ(ranks_on_node(*mpi_half), mpi_half->size());
}

}  // namespace
}  // namespace tessera::plan

// comm::share_gpu_requested (comm/nccl_communicator.hpp): TESSERA_SHARE_GPU's values, and a
// clear refusal of anything else (docs/multi-gpu.md, "Several ranks on one GPU").
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "comm/nccl_communicator.hpp"
#include "util/error.hpp"

namespace tessera::comm {
namespace {

constexpr const char* kVar = "TESSERA_SHARE_GPU";

// Restores the variable as the test found it.
class ShareGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* v = std::getenv(kVar);
    if (v) saved_ = v;
  }
  void TearDown() override {
    if (saved_)
      ::setenv(kVar, saved_->c_str(), 1);
    else
      ::unsetenv(kVar);
  }
  static bool with(const char* v) {
    ::setenv(kVar, v, 1);
    return share_gpu_requested();
  }
  std::optional<std::string> saved_;
};

TEST_F(ShareGpuTest, UnsetIsNo) {
  ::unsetenv(kVar);
  EXPECT_FALSE(share_gpu_requested());
}

TEST_F(ShareGpuTest, YesAndNoSpellings) {
  for (const char* v : {"1", "yes", "On", "TRUE"}) EXPECT_TRUE(with(v)) << v;
  for (const char* v : {"", "0", "no", "OFF", "false"}) EXPECT_FALSE(with(v)) << v;
}

TEST_F(ShareGpuTest, AnythingElseIsRefusedByName) {
  for (const char* v : {"2", "y", "share"}) {
    try {
      (void)with(v);
      ADD_FAILURE() << v << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("TESSERA_SHARE_GPU=") + v),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace tessera::comm

// util::MpiInitEnv (src/base/util/mpi_env.hpp): a singleton's MPI_Init without Open MPI's
// helper daemon, the variable set only while the guard lives, a user's value kept.
#include "util/mpi_env.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

namespace tessera::util {
namespace {

constexpr const char* kVar = "OMPI_MCA_ess_singleton_isolated";

std::optional<std::string> value() {
  const char* v = std::getenv(kVar);
  return v == nullptr ? std::nullopt : std::optional<std::string>(v);
}

// Restores the variable as the test found it.
class MpiInitEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = value(); }
  void TearDown() override {
    if (saved_)
      ::setenv(kVar, saved_->c_str(), 1);
    else
      ::unsetenv(kVar);
  }
  std::optional<std::string> saved_;
};

TEST_F(MpiInitEnvTest, SetWhileItLivesAndRemovedAfter) {
  ::unsetenv(kVar);
  {
    const MpiInitEnv env;
    EXPECT_EQ(value(), std::optional<std::string>("1"));
  }
  // Programs started after MPI_Init (a Python script's subprocesses) do not inherit it.
  EXPECT_EQ(value(), std::nullopt);
}

TEST_F(MpiInitEnvTest, AValueInTheEnvironmentIsKept) {
  ::setenv(kVar, "0", 1);  // the user asks for the daemon
  {
    const MpiInitEnv env;
    EXPECT_EQ(value(), std::optional<std::string>("0"));
  }
  EXPECT_EQ(value(), std::optional<std::string>("0"));
}

// The test binary's own MPI_Init (tests/test_main.cpp) ran with the guard: the variable is
// as the process was started with it (/proc/self/environ: the environment at exec).
TEST_F(MpiInitEnvTest, MpiInitLeftTheEnvironmentAsItWas) {
  std::ifstream in("/proc/self/environ", std::ios::binary);
  ASSERT_TRUE(in) << "/proc/self/environ";
  const std::string prefix = std::string(kVar) + "=";
  std::optional<std::string> at_start;
  for (std::string entry; std::getline(in, entry, '\0');)
    if (entry.rfind(prefix, 0) == 0) at_start = entry.substr(prefix.size());
  EXPECT_EQ(saved_, at_start);
}

}  // namespace
}  // namespace tessera::util

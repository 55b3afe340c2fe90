// Shared helpers for Tessera tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

namespace tessera::test {

/// Folder of the real tensors (../shared/data beside the repo), or "" when absent.
inline std::string shared_data_dir() {
  const char* e = std::getenv("TESSERA_SHARED_DATA");
  return e ? std::string(e) : std::string();
}

/// Full path of a shared tensor, or "" when it is not there.
std::string shared_tensor(const std::string& name);

/// A fresh random seed per call; TESSERA_TEST_SEED pins the first one to replay a failure.
/// Tests print the seed in their failure messages.
std::uint64_t fresh_seed();

/// Relative tolerance of a kernel result against the float64 reference, by value type.
template <typename T>
double tol() {
  return std::is_same_v<T, double> ? 1e-12 : 1e-5;
}

/// Raw pointers to factor matrices, with nullptr for `skip_mode` (a kernel must not read it).
template <typename T>
std::vector<const T*> pointers(const std::vector<std::vector<T>>& A, int skip_mode) {
  std::vector<const T*> p;
  for (std::size_t m = 0; m < A.size(); ++m)
    p.push_back(static_cast<int>(m) == skip_mode ? nullptr : A[m].data());
  return p;
}

/// Temporary folder unique to this test process group (same name on every rank when
/// called collectively after MPI init; created by rank 0).
std::string temp_dir();

}  // namespace tessera::test

/// Skips the test (on every rank) when a shared tensor is missing.
#define TESSERA_REQUIRE_SHARED(path_var, name)                       \
  const std::string path_var = ::tessera::test::shared_tensor(name); \
  if (path_var.empty())                                              \
  GTEST_SKIP() << "shared tensor " << name << " not found "          \
               << "(set TESSERA_SHARED_DATA)"

#include "test_util.hpp"

#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>

namespace tessera::test {

std::string shared_tensor(const std::string& name) {
  std::string dir = shared_data_dir();
  if (dir.empty()) return "";
  std::string p = dir + "/" + name;
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? p : "";
}

std::uint64_t fresh_seed() {
  static std::uint64_t next = [] {
    const char* e = std::getenv("TESSERA_TEST_SEED");
    if (e != nullptr && *e != '\0')
      return static_cast<std::uint64_t>(std::strtoull(e, nullptr, 10));
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }();
  return next++;
}

std::string temp_dir() {
  static std::string dir;
  if (!dir.empty()) return dir;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::int64_t id = rank == 0 ? static_cast<std::int64_t>(::getpid()) : 0;
  MPI_Bcast(&id, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  dir = (std::filesystem::temp_directory_path() / ("tessera-test-" + std::to_string(id))).string();
  if (rank == 0) std::filesystem::create_directories(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

}  // namespace tessera::test

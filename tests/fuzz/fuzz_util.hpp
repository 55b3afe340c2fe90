// Shared pieces of the libFuzzer harnesses (tests/fuzz, docs/reliability.md).
//
// Every harness treats tessera::Error (InputError, CollectiveError, failed preconditions:
// a message for the user) as the expected answer to a bad input. Anything else is a
// finding and aborts, so libFuzzer keeps the input: another exception type (std::out_of_range,
// std::bad_alloc, std::length_error... means an input reached code that did not check it),
// a crash or sanitizer report, or a broken invariant on an accepted input.
#pragma once

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "util/error.hpp"
#include "util/log.hpp"
#include "util/mpi_env.hpp"
#include "util/sanitizer.hpp"

namespace tessera::fuzz {

/// Reports a finding on stderr and aborts (libFuzzer saves the input as crash-*).
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "tessera fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

/// Initialises MPI once (a singleton rank: the readers are collective over a communicator)
/// and silences Tessera's log; MPI_Finalize runs at exit.
inline void init_mpi() {
  int done = 0;
  MPI_Initialized(&done);
  if (done) return;
  int provided = 0;
  {
    const util::MpiInitEnv env;        // as the tessera binary does (util/mpi_env.hpp)
    const util::LeakCheckPause pause;  // OpenMPI's own allocations
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  log::set_rank(0, 1);
  log::set_verbosity(0);
  std::atexit([] {
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
    util::leak_check_before_mpi_finalize();
    MPI_Finalize();
  });
}

/// A file in $TMPDIR (or /tmp) that holds the current input; removed at exit. Its name ends
/// in `suffix` (".tns", ".h5") so the readers see a usual name.
class TempFile {
 public:
  explicit TempFile(const std::string& suffix) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir && *dir ? dir : "/tmp") + "/tessera-fuzz-XXXXXX" + suffix;
    fd_ = mkstemps(path_.data(), static_cast<int>(suffix.size()));
    if (fd_ < 0) finding("cannot create a temporary file at " + path_);
  }
  ~TempFile() {
    close(fd_);
    unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  /// Replaces the file's content with `data`.
  const std::string& write(const std::uint8_t* data, std::size_t size) {
    if (ftruncate(fd_, 0) != 0) finding("ftruncate " + path_);
    std::size_t done = 0;
    while (done < size) {
      const ssize_t w = pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (w <= 0) finding("pwrite " + path_);
      done += static_cast<std::size_t>(w);
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

/// Runs f(); tessera::Error is the expected answer to a bad input, any other exception is
/// a finding. Returns true when f() returned normally.
template <typename F>
bool expect_tessera_errors(const char* what, F&& f) {
  try {
    f();
    return true;
  } catch (const tessera::Error&) {
    return false;
  } catch (const std::exception& e) {
    finding(std::string(what) + ": exception other than tessera::Error: " + e.what());
  } catch (...) {
    finding(std::string(what) + ": non-standard exception");
  }
}

}  // namespace tessera::fuzz

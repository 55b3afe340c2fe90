#include "comm/first_failure.hpp"

#include <chrono>
#include <thread>

namespace tessera::comm {

FirstFailure::FirstFailure(MPI_Comm comm) {
  int size = 1, rank = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  if (size < 2) return;
  // The world communicator returns errors (MpiRuntime); a library without RMA on this
  // transport then leaves the window out instead of ending the job. Agreed by all ranks so
  // that every rank takes the same path (creation and freeing are collective).
  const MPI_Aint bytes = rank == 0 ? static_cast<MPI_Aint>(sizeof(long long)) : 0;
  int ok = MPI_Win_allocate(bytes, static_cast<int>(sizeof(long long)), MPI_INFO_NULL, comm, &base_,
                            &win_) == MPI_SUCCESS
               ? 1
               : 0;
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
  if (!all) {
    if (ok) MPI_Win_free(&win_);
    win_ = MPI_WIN_NULL;
    return;
  }
  MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN);
  if (rank == 0) {
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win_);
    *base_ = 0;
    MPI_Win_unlock(0, win_);
  }
  MPI_Barrier(comm);  // the counter is 0 before anyone can claim
  MPI_Win_lock_all(MPI_MODE_NOCHECK, win_);
}

FirstFailure::~FirstFailure() {
  if (win_ == MPI_WIN_NULL) return;
  MPI_Win_unlock_all(win_);
  MPI_Win_free(&win_);
}

bool FirstFailure::claim(double timeout_s) {
  if (claimed_ >= 0) return claimed_ == 1;
  if (win_ == MPI_WIN_NULL) {
    claimed_ = 1;
    return true;
  }
  long long one = 1, before = -1;
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Rget_accumulate(&one, 1, MPI_LONG_LONG, &before, 1, MPI_LONG_LONG, 0, 0, 1, MPI_LONG_LONG,
                          MPI_SUM, win_, &req) != MPI_SUCCESS) {
    claimed_ = 1;
    return true;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int done = 0;
  while (!done) {
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
    if (done) break;
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  claimed_ = (!done || before == 0) ? 1 : 0;
  return claimed_ == 1;
}

long long FirstFailure::claims() {
  if (win_ == MPI_WIN_NULL) return 0;
  long long zero = 0, now = 0;
  MPI_Fetch_and_op(&zero, &now, MPI_LONG_LONG, 0, 0, MPI_NO_OP, win_);
  MPI_Win_flush(0, win_);
  return now;
}

}  // namespace tessera::comm

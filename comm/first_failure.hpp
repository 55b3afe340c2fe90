// Which rank failed first, decided without waiting for the other ranks (they may be blocked
// in a collective the failing rank will never join): rank 0 of the communicator holds a
// counter that a failing rank increments with one one-sided fetch-and-add (MPI RMA, passive
// target). The first rank to increment it prints the job's one error message; the others
// stay silent. The driver then ends the job with MPI_Abort.
#pragma once

#include <mpi.h>

namespace tessera::comm {

class FirstFailure {
 public:
  /// Collective over `comm`: creates the counter (a one-element window on rank 0). On one
  /// rank, or where the MPI library cannot create the window, nothing is created and every
  /// claim() answers true.
  explicit FirstFailure(MPI_Comm comm);
  /// Collective over the communicator (frees the window): every rank that returns normally
  /// destroys it; a failing rank ends the job with MPI_Abort instead.
  ~FirstFailure();
  FirstFailure(const FirstFailure&) = delete;
  FirstFailure& operator=(const FirstFailure&) = delete;

  /// Not collective. True when this rank is the first to claim a failure, or when no answer
  /// came within `timeout_s` seconds (rank 0 busy outside MPI with a transport that needs
  /// it to progress): a duplicate line is better than none. Later calls on a rank that has
  /// claimed answer the same as the first.
  bool claim(double timeout_s = 2.0);

  /// Number of claims made so far on all ranks, read from rank 0 (for tests; collective-free,
  /// blocking). 0 when there is no window.
  long long claims();

 private:
  MPI_Win win_ = MPI_WIN_NULL;
  long long* base_ = nullptr;
  int claimed_ = -1;  // -1: not yet; 0/1: the answer given
};

}  // namespace tessera::comm

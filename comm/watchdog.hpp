// The job's watchdog (docs/reliability.md, "Faults on several ranks"): on several ranks,
// every rank's watchdog thread exchanges a heartbeat each second with rank 0 over a TCP
// connection of its own (not MPI, not NCCL, so that it works while the main thread is blocked
// in a collective). A rank that is killed or crashes closes its connection without a goodbye;
// a rank that is stopped (SIGSTOP, a frozen node) stops beating. Rank 0 sees either at once
// or after `timeout_s` of silence, prints one line naming the rank, its host and pid, the
// cause and where that rank was (iteration and point, util/fault.hpp), tells the other
// ranks, ends a stopped rank of its own host with SIGKILL, and every live rank exits with
// status 1, so no rank waits in a collective for ever. Rank 0 failing is seen the same way
// by the others (rank 1 prints).
//
// What it does not report: a rank that ends through the driver's error path (it prints its
// own message, then calls failing()), a finished rank (its destructor says goodbye), ranks
// ended after a stop signal (the launcher is ending the job). A whole job stopped and
// continued (Slurm's suspend, Ctrl-Z) is not a fault: a watchdog that finds its own thread
// was not scheduled for a while restarts every peer's clock.
//
// If the connections cannot be made (no TCP between the hosts, a firewall), the watchdog is
// off for the job, with one warning line on rank 0; NCCL waits are then bounded by
// --nccl-timeout only.
#pragma once

#include <mpi.h>

#include <memory>

namespace tessera::comm {

class Watchdog {
 public:
  /// Collective over `comm`. `timeout_s` > 0: seconds without a heartbeat before a rank
  /// counts as stopped; 0 (or one rank): no watchdog (every member then does nothing).
  Watchdog(MPI_Comm comm, double timeout_s);
  /// Not collective: says goodbye (the peers stop watching this rank) and joins the thread.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// This rank is ending the job with its own message (the driver's error path, before
  /// MPI_Abort): the peers do not report its end.
  void failing() noexcept;
  /// True while the heartbeats run.
  bool active() const noexcept;

  struct State;

 private:
  std::unique_ptr<State> s_;
};

}  // namespace tessera::comm

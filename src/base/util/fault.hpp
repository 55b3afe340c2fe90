// Where a rank is in its run, and the project's own fault injection (docs/reliability.md,
// "Faults on several ranks").
//
// The algorithms and the communicators mark the points a run passes: the iteration number,
// the start of its local sparse kernel (MTTKRP, TTMc), a collective handed to MPI or NCCL.
// The watchdog (comm/watchdog.hpp) sends the last mark with every heartbeat, so that the
// message that ends a job names where the failed rank was.
//
// A test (or a user reproducing a failure) arms one fault with `--inject-fault
// RANK:KIND:POINT[:ITERATION]`: the first time rank RANK reaches POINT in an iteration >=
// ITERATION (default 1), it
//   kill   raises SIGKILL on itself (a rank killed by the kernel's OOM killer, a crash),
//   stop   raises SIGSTOP on itself (a rank that stops answering: a frozen node, a debugger),
//   oom    takes all free device memory and then makes a real device allocation, which fails
//          as on a GPU another process filled (the cuda backend registers this action),
//   error  throws an error of its own (a failure this rank finds alone).
// POINT is `prepare` (before the tensor is placed on the rank's device), `kernel` (the
// start of an iteration's local MTTKRP or TTMc; on the CUDA device loop, the iteration's
// launch) or `collective` (a collective handed to MPI, or enqueued on NCCL and not yet
// waited for; on the CUDA device loop, the wait for the iteration's graph, whose
// collectives are then in flight).
#pragma once

#include <functional>
#include <string>

namespace tessera::util::fault {

enum class Kind { none, kill, stop, oom, error };
enum class Point { none, prepare, kernel, collective };

/// One armed fault. rank < 0: none.
struct Spec {
  int rank = -1;
  Kind kind = Kind::none;
  Point point = Point::none;
  int iteration = 1;
};

/// Parses "RANK:KIND:POINT[:ITERATION]" (as above). Throws InputError naming
/// --inject-fault and what is wrong. "" gives an empty Spec.
Spec parse(const std::string& text);
/// "1:kill:kernel:4" (parse's input form).
std::string to_string(const Spec& s);
const char* name(Kind k);
const char* name(Point p);

/// Arms `s` for this process, which is rank `my_rank` (a spec for another rank arms
/// nothing). Replaces an earlier one; Spec{} disarms.
void arm(const Spec& s, int my_rank);

/// The iteration under way (1-based; 0 before the first). Set by the algorithms; calls the
/// progress hook (set_progress_hook) when the iteration changes.
void set_iteration(int iteration);
/// A function called (on the caller's thread) when set_iteration changes the iteration: the
/// watchdog's, which sends a heartbeat early so that the last one names a recent iteration.
/// It must be cheap and must not throw. nullptr: none.
void set_progress_hook(void (*hook)());
int iteration();

/// Marks `p` as this rank's current point and fires the armed fault when it matches.
/// Cheap when nothing is armed (two relaxed atomic stores and a load).
void at(Point p);
/// The last point marked (Point::none before any).
Point current();

/// The action of Kind::oom on this rank's device, registered by the backend that owns the
/// device (the cuda backend); without one, an oom fault throws an Error saying so.
void set_oom_action(std::function<void()> action);

}  // namespace tessera::util::fault

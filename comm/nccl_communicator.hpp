// NCCL communicator factory (device buffers on a CUDA stream), bootstrapped from MPI.
#pragma once

#include <memory>

#include "comm/mpi_communicator.hpp"

namespace tessera::comm {

/// Creation options of the NCCL communicator (the drivers set them from the command line).
struct NcclOptions {
  /// Seconds a wait for a collective, an initialisation or a split may take before the
  /// communicator is aborted and the call throws (--nccl-timeout; 0 = no limit). The
  /// communicators split from it inherit it.
  double timeout_s = 1800;
};

/// True when this build has the NCCL communicator.
bool nccl_available();

/// Bootstraps NCCL over the ranks of `boot`: local rank from a hostname-hash
/// allgather, cudaSetDevice(local_rank), unique id from rank 0 by MPI_Bcast,
/// ncclCommInitRank. Buffers passed to the result are device pointers; calls are
/// enqueued on the communicator's stream and complete before returning (waits poll
/// ncclCommGetAsyncError and abort the communicator on error or after
/// `options.timeout_s`). Throws InputError on a negative or non-finite timeout, and
/// tessera::Error "built without CUDA" in a CPU-only build.
std::unique_ptr<Communicator> make_nccl_communicator(const MpiCommunicator& boot,
                                                     const NcclOptions& options = {});

/// Rank of this process among the ranks of `boot` on the same host (hostname hash).
int local_rank(const MpiCommunicator& boot);

/// True when the environment asks for several ranks on one GPU (TESSERA_SHARE_GPU=1; also
/// yes/on/true, and 0/no/off/false or unset for no). A testing mode (docs/multi-gpu.md,
/// "Several ranks on one GPU"): make_nccl_communicator then gives the ranks that share a GPU
/// NCCL host ids of their own, so that NCCL joins them over its socket transport instead of
/// refusing them. Correct, not fast: it lets the multi-rank code run on a one-GPU machine.
/// Throws InputError naming the variable for any other value.
bool share_gpu_requested();

}  // namespace tessera::comm

// Checkpoint files for restarting CP-ALS and Tucker-HOOI runs (docs/formats.md,
// "Checkpoint file"). A checkpoint is a complete model file of the usual format
// ("tessera-kruskal" or "tessera-tucker" v1, so `read_kruskal_h5` / `read_tucker_h5` read
// it as the model after its last iteration) with extra attributes on /:
//   checkpoint (int 1), checkpoint_version (int), converged (int 0/1),
//   precision (string "double" | "float"), input_nnz (uint64), input_norm2 (double),
//   input_coord_hash (uint64), checksum (uint64 over the datasets and the iteration).
// Written atomically: a temporary file in the same folder, fsync, rename, fsync of the
// folder; the previous checkpoint stays valid until the rename.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "model/kruskal.hpp"
#include "model/tucker.hpp"
#include "tensor/sparse_tensor.hpp"

namespace tessera::io {

/// Identity of an input tensor, independent of the rank count, the partition and the
/// relabelling: dims, nonzeros, sum of squared values, and the wrapping sum over the
/// nonzeros of a hash of their original coordinates.
struct TensorFingerprint {
  std::vector<std::uint64_t> dims;
  std::uint64_t nnz = 0;
  double norm2 = 0;  ///< compared with a relative tolerance (summation order varies)
  std::uint64_t coord_hash = 0;
};

/// Collective over `c`: the fingerprint of the tensor whose nonzeros are spread over the
/// ranks in `block` (global coordinates, repeated coordinates already summed).
/// `original_index(mode, label)` maps relabelled coordinates back to the input's; empty =
/// identity.
template <typename T>
TensorFingerprint tensor_fingerprint(
    const SparseTensor<T>& block,
    const std::function<std::uint64_t(int, std::uint64_t)>& original_index,
    const comm::Communicator& c);

/// The same in pieces, for a tensor streamed chunk by chunk (memory tier 3): add every
/// local piece of nonzeros to `local` (starts default-constructed), then finish once,
/// collectively. Equal to tensor_fingerprint of the pieces' union.
template <typename T>
void add_to_fingerprint(const SparseTensor<T>& piece,
                        const std::function<std::uint64_t(int, std::uint64_t)>& original_index,
                        TensorFingerprint* local);
/// Collective over `c`: sums the ranks' `local` parts; dims are the global dims.
TensorFingerprint finish_fingerprint(const TensorFingerprint& local,
                                     const std::vector<std::uint64_t>& dims,
                                     const comm::Communicator& c);

/// Everything a checkpoint holds besides the model.
struct CheckpointInfo {
  int iteration = 0;                ///< iterations completed
  bool converged = false;           ///< the last iteration met the tolerance
  std::vector<double> fit_history;  ///< fit after each iteration (size == iteration)
  std::string precision = "double";
  TensorFingerprint input;          ///< input.dims == the model's dims
  std::string options_json = "{}";  ///< JSON object of the run's options
};

/// Test hooks of the writers (fault injection); null in normal use.
struct CheckpointWriteHooks {
  /// Called with the temporary file's name after it is complete and synced, before the
  /// rename; an exception thrown here must leave the previous checkpoint intact.
  std::function<void(const std::string& tmp)> before_rename;
};

/// Writes a CP checkpoint to `path` atomically (see above). Call on one rank. Throws
/// InputError when the folder is not writable (the temporary file is removed).
void write_cp_checkpoint(const std::string& path, const KruskalModel& m, const CheckpointInfo& info,
                         const CheckpointWriteHooks* hooks = nullptr);
/// Reads a CP checkpoint; any problem (missing, not a checkpoint, truncated, corrupted,
/// checksum mismatch) is an InputError naming the file.
KruskalModel read_cp_checkpoint(const std::string& path, CheckpointInfo* info);

/// Tucker versions of the above (core and factors).
void write_tucker_checkpoint(const std::string& path, const TuckerModel& m,
                             const CheckpointInfo& info,
                             const CheckpointWriteHooks* hooks = nullptr);
TuckerModel read_tucker_checkpoint(const std::string& path, CheckpointInfo* info);

/// What the run resuming a checkpoint has, to compare with what the checkpoint saved.
struct ResumeCheck {
  TensorFingerprint input;  ///< of the tensor this run read
  std::string precision;
  std::string options_json = "{}";      ///< this run's options (JSON object)
  std::vector<std::string> must_match;  ///< option keys that must be equal ("rank", "svd", ...)
  /// Option keys left out of the informational list of differences (file names, limits).
  std::vector<std::string> ignore;
};

/// Throws InputError naming every difference in the input (dims, nnz, norm, coordinates),
/// the precision and the `must_match` options. Returns "key: saved -> now" for the other
/// options that differ (allowed: iteration limit, tolerance, strategy, partition, ...).
std::vector<std::string> check_resume(const std::string& path, const CheckpointInfo& saved,
                                      const ResumeCheck& now);

/// Default checkpoint name for a model path: "run.h5" -> "run.ckpt.h5", "run" ->
/// "run.ckpt.h5".
std::string default_checkpoint_path(const std::string& model_path);

/// Throws InputError unless a file can be created in the folder of `path` (creates and
/// removes a temporary file there) and `path` is not a folder. Call on one rank.
void check_checkpoint_writable(const std::string& path);

}  // namespace tessera::io

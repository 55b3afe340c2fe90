// The output policy: one place that decides how every Tessera writer (models, checkpoints,
// run records, contraction results, converted and partitioned stores, text exports)
// creates its file, and which outputs a run may write at all (docs/reliability.md,
// "Outputs").
//
//  - Writing: a regular (or not yet existing) output is written to a temporary file next
//    to it, named PATH.tmp-HOST_PID[_TAG], then fsynced and renamed over PATH, so a reader
//    never sees half a file and an interrupted write leaves the previous file as it was.
//    A special file (character device such as /dev/null, FIFO) is written directly: a
//    rename would replace the device node or the pipe with a regular file. HDF5 files
//    (models, checkpoints, tensor stores) need a seekable file and are refused there.
//  - Cleaning: the temporary is removed on every error path (AtomicOutput's destructor);
//    temporaries that processes of this host left when they were killed are removed at
//    the next start of a run writing the same output (the name carries host and pid).
//  - Checking, before any work (OutputSet::validate): no output is the same file as an
//    input (device and inode, so hard links, symbolic links and other spellings are
//    caught) and no two outputs are the same file; every output's folder accepts a new
//    file (a probe is created and removed); an existing regular file is replaced only when
//    Tessera wrote it (its kind is recognised: a model's or store's format attribute, the
//    text header, the run record's key) or with --force. An input is never replaced, not
//    even with --force.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace tessera::io {

/// What an output holds. Decides which existing files it may replace without --force (a
/// file Tessera wrote of the same kind) and whether a special file can take it (HDF5
/// kinds cannot).
enum class OutputKind {
  model,   ///< HDF5 model or checkpoint (format "tessera-kruskal" or "tessera-tucker")
  store,   ///< HDF5 tensor store (format "tessera-tensor")
  text,    ///< FROSTT text, .tns or .tns.gz, with the header line write_tns writes
  record,  ///< JSON run record (key "written_by": "tessera")
};

/// The key and value every run record carries (drivers' write_json), so a later run
/// recognises the file as Tessera's own.
inline constexpr const char* kRecordKey = "written_by";
inline constexpr const char* kRecordValue = "tessera";

/// Name of this process's temporary file for `path`: PATH.tmp-HOST_PID, or
/// PATH.tmp-HOST_PID_TAG when `tag` is given (it must start with a letter). Host and pid
/// let a later run tell a stale temporary (its process is gone) from a live one.
std::string temp_path(const std::string& path, const std::string& tag = "");

/// True when `path` (links followed) is a character device or a FIFO: written directly.
bool is_special_file(const std::string& path);

/// True when `path` is a file Tessera wrote, of kind `kind`. Never throws; false for a
/// file that cannot be read.
bool written_by_tessera(const std::string& path, OutputKind kind);

/// Throws InputError, starting with `what`, unless a new file can be created in the folder
/// of `path` (a probe file is created there and removed).
void probe_folder(const std::string& path, const std::string& what);

/// Removes the temporaries of `path` (named as temp_path names them, in the folder of
/// `path`) that processes of this host left and that no longer run. Temporaries of other
/// hosts and of running processes are kept. Returns the names removed. Never throws.
std::vector<std::string> remove_stale_temporaries(const std::string& path);

/// One output file being written, on one process. A regular or missing `path` is written
/// at write_path() (a temporary next to it; for a symbolic link to a regular file, next to
/// the link's target, which is then replaced and the link kept) and commit() fsyncs it and
/// renames it over the output; destruction without commit() removes the temporary. A
/// character device or FIFO is written directly (write_path() == path()) and commit()
/// does nothing. Throws InputError for a block device, a socket or a folder.
class AtomicOutput {
 public:
  explicit AtomicOutput(const std::string& path, const std::string& tag = "");
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  const std::string& path() const { return path_; }
  /// Where the writer writes: the temporary, or the special file itself.
  const std::string& write_path() const { return special_ ? path_ : temp_; }
  bool special() const { return special_; }
  /// Regular outputs: fsync of the temporary, rename over the output, fsync of the folder
  /// (InputError naming both files on failure; the temporary is then removed). Close every
  /// handle on write_path() first.
  void commit();

 private:
  std::string path_, target_, temp_;
  bool special_ = false, committed_ = false;
};

/// Collective form for writers whose ranks write one file together (text exports,
/// tensor stores): rank 0 holds the AtomicOutput, every rank learns write_path() and
/// special(). Errors (a block device, ...) are agreed by every rank.
class SharedOutput {
 public:
  SharedOutput(const std::string& path, const comm::Communicator& c, const std::string& tag = "");
  ~SharedOutput();
  SharedOutput(const SharedOutput&) = delete;
  SharedOutput& operator=(const SharedOutput&) = delete;
  const std::string& write_path() const { return write_path_; }
  bool special() const { return special_; }
  /// Rank 0 commits (see AtomicOutput::commit); other ranks do nothing. Call it inside
  /// the caller's collective step, after every rank closed its handles.
  void commit();

 private:
  std::unique_ptr<AtomicOutput> root_;
  std::string write_path_;
  bool special_ = false;
};

/// Collective: every rank passes its bytes; rank 0 opens `path` (a special file) once and
/// writes them in rank order (the other ranks' bytes reach it in pieces of 64 MiB), so a
/// FIFO's reader sees one stream. Errors are agreed by every rank.
void write_in_rank_order(const std::string& path, const char* data, std::size_t n,
                         const comm::Communicator& c);

/// The inputs and outputs of one run, checked before any work starts.
class OutputSet {
 public:
  /// `option` names the input as the user gave it ("input", "X", "--resume"); an empty
  /// path is ignored, a missing file is left to the reader to report.
  void add_input(const std::string& option, const std::string& path);
  /// `option` names the output as the user gave it ("--out", "--json", "output"); an empty
  /// path is ignored. `may_replace` names an input this output may be (a checkpoint
  /// continuing the one resumed; partition in place). `hint` is added to the refusal when
  /// the output is another input.
  void add_output(const std::string& option, const std::string& path, OutputKind kind,
                  const std::string& may_replace = "", const std::string& hint = "");

  /// How the refusals spell the force option ("--force"; the Python module's "force=True").
  void set_force_option(const std::string& spelling) { force_option_ = spelling; }

  /// Local: throws InputError for the first output that breaks the policy (see the top of
  /// this header); `force` lets existing files that Tessera did not write be replaced.
  void check(bool force) const;
  /// Local: remove_stale_temporaries of every output; returns the names removed.
  std::vector<std::string> clean() const;
  /// Collective: check() on rank 0, the result agreed by every rank (CollectiveError on
  /// every rank, one message); then the first rank of every host removes the stale
  /// temporaries of its host. Returns the number removed on this rank.
  std::size_t validate(bool force, const comm::Communicator& c) const;

 private:
  struct Entry {
    std::string option, path, may_replace, hint;
    OutputKind kind = OutputKind::record;
  };
  std::vector<Entry> inputs_, outputs_;
  std::string force_option_ = "--force";
};

}  // namespace tessera::io

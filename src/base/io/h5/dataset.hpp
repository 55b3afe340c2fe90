// Datasets and links of HDF5 files (src/base/io/h5/, docs/io-hdf5.md), shared by the tensor
// store, model files and checkpoints: open-or-fail, shapes, whole and 1-D range reads and
// writes, and the storage check that keeps HDF5 1.10 from reading past its own buffers.
// `path` is the file the messages name. Failures are InputErrors in the layer's form.
#pragma once

#include <hdf5.h>

#include <bit>
#include <cstddef>
#include <string>
#include <vector>

#include "io/h5/filter.hpp"
#include "io/h5/handle.hpp"

static_assert(std::endian::native == std::endian::little,
              "Tessera's HDF5 files hold little-endian elements written straight from memory");

namespace tessera::io::h5 {

/// Whether a link (dataset or group; "a/b/c" looked up part by part) exists. HDF5 failing
/// to tell is an error ("cannot look up ... : the file is corrupted"), not "missing".
bool has_link(hid_t loc, const std::string& name, const std::string& path);

/// "uint32", "int64", "float64", "string", "compound" or "a non-numeric type".
std::string type_text(hid_t type);

/// Opens a dataset or throws, naming what was expected there ("uint32 coordinates"):
/// "'path': dataset 'name' (expected) is missing", or
/// "'path': cannot open 'name' as a dataset (expected ...) (HDF5: ...)".
Handle open_dataset(hid_t loc, const std::string& name, const std::string& path,
                    const std::string& expected, hid_t dapl = H5P_DEFAULT);

/// The dimensions of a dataset (empty for a scalar; an error when HDF5 cannot tell).
std::vector<hsize_t> shape_of(hid_t dset, const std::string& name, const std::string& path);

/// Creates a dataset of `file_type` and `shape` (dcpl: its creation properties).
Handle create_dataset(hid_t loc, const std::string& name, hid_t file_type,
                      const std::vector<hsize_t>& shape, const std::string& path,
                      hid_t dcpl = H5P_DEFAULT);

/// The whole dataset, in `mem_type`; nothing for a dataset with no elements. Its compressed
/// chunks are checked first (filter.hpp): an InputError names what is wrong.
void read_all(hid_t dset, hid_t mem_type, void* out, const std::string& name,
              const std::string& path);
void write_all(hid_t dset, hid_t mem_type, const void* in, const std::string& name,
               const std::string& path);

/// Elements [first, first + count) of a 1-D dataset, in `mem_type`. Return HDF5's status
/// (< 0: failed, the reason left for detail()): the callers' messages name the range. The
/// compressed chunks read are checked first (filter.hpp) through `check` (null: a check of
/// this call only); one that fails its check fails the read before HDF5 sees it, and *why
/// (when not null) says what is wrong with the dataset.
herr_t read_range(hid_t dset, hsize_t first, hsize_t count, hid_t mem_type, void* out,
                  ChunkCheck* check = nullptr, std::string* why = nullptr);
herr_t write_range(hid_t dset, hsize_t first, hsize_t count, hid_t mem_type, const void* in);

/// Checks that a 1-D dataset of `length` elements of `elem` bytes (chunked by `chunk`, 0 =
/// not chunked) stores as many bytes as its shape says, chunk by chunk: an unfiltered chunk
/// exactly its bytes, a compressed one enough to inflate to them (zlib: 1032:1 at most),
/// every chunk stored inside the file (not at address 0), and no filter but
/// deflate and shuffle. HDF5 1.10 trusts the sizes its chunk index and layout message
/// record, and a corrupted one makes H5Dread copy past its own buffer or allocate what the
/// file cannot fill (found by tests/fuzz/fuzz_h5store): such a file is refused ("dataset
/// 'name' ...: the file is corrupted") before anything reads from it.
void check_storage_sizes(hid_t dset, hid_t dcpl, const std::string& name, hsize_t length,
                         hsize_t chunk, std::size_t elem, const std::string& path);

}  // namespace tessera::io::h5

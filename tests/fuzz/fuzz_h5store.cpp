// libFuzzer harness of the HDF5 tensor store reader (io::H5TensorReader, io::read_h5,
// src/base/io/h5store.cpp).
//
// The input bytes are written to a temporary .h5 file, which is opened as a store. An
// accepted store is then read: the first and last nonzeros (at most kWindow each) through
// HDF5 and through the direct pread path (1 and 2 threads, double and float), the start
// of every block of a stored partition, and, for small stores, the whole store
// collectively (read_h5). Every coordinate read must lie inside the dims and every value
// be finite (the checks the reader promises).
//
// A crash inside libhdf5 itself on a corrupt file is HDF5's bug, not Tessera's (its stack
// has no Tessera frame below the HDF5 call): report it separately (docs/reliability.md).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "fuzz_util.hpp"
#include "io/h5store.hpp"

namespace {

using tessera::nnz_t;
using tessera::fuzz::finding;

constexpr nnz_t kWindow = 512;      // nonzeros read at each end of the store
constexpr nnz_t kWholeRead = 4096;  // stores up to this size are read whole

struct Buffers {
  std::vector<std::vector<tessera::index_t>> idx;
  std::vector<tessera::index_t*> ptr;
  std::vector<double> d;
  std::vector<float> f;
  Buffers(int order, nnz_t n)
      : idx(static_cast<std::size_t>(order), std::vector<tessera::index_t>(std::size_t(n))),
        d(static_cast<std::size_t>(n)),
        f(static_cast<std::size_t>(n)) {
    for (auto& v : idx) ptr.push_back(v.data());
  }
};

void check_read(const tessera::io::H5TensorInfo& info, const Buffers& b, nnz_t count,
                const char* what) {
  for (int m = 0; m < info.order; ++m)
    for (nnz_t k = 0; k < count; ++k)
      if (b.idx[static_cast<std::size_t>(m)][static_cast<std::size_t>(k)] >=
          info.dims[static_cast<std::size_t>(m)])
        finding(std::string(what) + ": a coordinate outside the dims was returned");
  for (nnz_t k = 0; k < count; ++k)
    if (!std::isfinite(b.d[static_cast<std::size_t>(k)]))
      finding(std::string(what) + ": a non-finite value was returned");
}

void read_store(const std::string& path, const tessera::comm::Communicator& world) {
  tessera::io::H5TensorReader r(path);
  const tessera::io::H5TensorInfo info = r.info();
  if (info.order < 1 || info.order > tessera::kMaxOrder ||
      info.dims.size() != static_cast<std::size_t>(info.order) || info.nnz < 0)
    finding("store accepted with order " + std::to_string(info.order) + ", " +
            std::to_string(info.dims.size()) + " dims, nnz " + std::to_string(info.nnz));
  const nnz_t n = std::min(info.nnz, kWindow);
  Buffers b(info.order, n);
  for (const nnz_t first : {nnz_t(0), info.nnz - n}) {
    tessera::fuzz::expect_tessera_errors("read", [&] {
      r.read(first, n, b.ptr.data(), b.d.data());
      check_read(info, b, n, "read<double>");
    });
    tessera::fuzz::expect_tessera_errors("read<float>",
                                         [&] { r.read(first, n, b.ptr.data(), b.f.data()); });
    for (int threads : {1, 2}) {
      tessera::fuzz::expect_tessera_errors("read_direct", [&] {
        r.set_direct_piece_bytes(64);
        r.read_direct(first, n, b.ptr.data(), b.d.data(), threads);
        check_read(info, b, n, "read_direct<double>");
      });
      tessera::fuzz::expect_tessera_errors("read_direct<float>", [&] {
        r.read_direct(first, n, b.ptr.data(), b.f.data(), threads);
      });
    }
  }
  if (info.partition) {
    const int blocks = std::min(info.partition->nblocks(), 64);
    for (int blk = 0; blk < blocks; ++blk) {
      const nnz_t c = std::min(info.partition->block_range(blk).second, n);
      tessera::fuzz::expect_tessera_errors("read_block", [&] {
        r.read_block(blk, 0, c, b.ptr.data(), b.d.data());
        check_read(info, b, c, "read_block");
      });
    }
  }
  if (info.nnz <= kWholeRead) {
    tessera::io::H5ReadOptions o;
    o.progress = false;
    o.threads = 1;
    tessera::fuzz::expect_tessera_errors("read_h5", [&] {
      const auto res = tessera::io::read_h5(path, world, o);
      if (res.local.nnz() != info.nnz) finding("read_h5 returned another nonzero count");
      for (int m = 0; m < res.local.order(); ++m)
        for (auto i : res.local.idx[static_cast<std::size_t>(m)])
          if (i >= res.local.dims[static_cast<std::size_t>(m)])
            finding("read_h5 returned a coordinate outside the dims");
    });
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tessera::fuzz::init_mpi();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static tessera::fuzz::TempFile file(".h5");
  static tessera::comm::MpiCommunicator world(MPI_COMM_WORLD);
  const std::string& path = file.write(data, size);
  tessera::fuzz::expect_tessera_errors("open the store", [&] { read_store(path, world); });
  return 0;
}

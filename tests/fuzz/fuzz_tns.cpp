// libFuzzer harness of the FROSTT .tns reader (io::read_tns, src/base/io/tns.cpp).
//
// The input bytes are the file (inflated first when they start with the gzip magic, as
// read_tns decides from the content). Each input is read twice: with the default options,
// and with tiny read chunks and gzip blocks (sizes derived from the input length, so lines
// cross chunk boundaries) and automatic index base. An accepted file must give a tensor
// whose nonzero count is the reported one and whose coordinates lie inside its dims.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/mpi_communicator.hpp"
#include "fuzz_util.hpp"
#include "io/tns.hpp"

namespace {

void check_result(const tessera::io::TnsReadResult& r, const char* pass) {
  using tessera::fuzz::finding;
  const auto& x = r.local;
  if (x.nnz() != r.global_nnz) finding(std::string(pass) + ": local nnz != global nnz on 1 rank");
  if (x.order() < 1 || x.order() > tessera::kMaxOrder)
    finding(std::string(pass) + ": order " + std::to_string(x.order()) + " accepted");
  if (static_cast<int>(x.idx.size()) != x.order()) finding(std::string(pass) + ": idx size");
  for (int m = 0; m < x.order(); ++m) {
    if (x.idx[static_cast<std::size_t>(m)].size() != x.vals.size())
      finding(std::string(pass) + ": mode and value arrays differ in length");
    for (auto i : x.idx[static_cast<std::size_t>(m)])
      if (i >= x.dims[static_cast<std::size_t>(m)])
        finding(std::string(pass) + ": coordinate outside the dims");
  }
  for (double v : x.vals)
    if (!std::isfinite(v)) finding(std::string(pass) + ": non-finite value accepted");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tessera::fuzz::init_mpi();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static tessera::fuzz::TempFile file(".tns");
  static tessera::comm::MpiCommunicator world(MPI_COMM_WORLD);
  const std::string& path = file.write(data, size);

  tessera::io::TnsReadOptions plain;
  plain.progress = false;
  tessera::fuzz::expect_tessera_errors("read_tns (default options)", [&] {
    check_result(tessera::io::read_tns(path, world, plain), "default options");
  });

  tessera::io::TnsReadOptions tiny = plain;
  tiny.base = tessera::io::IndexBase::automatic;
  tiny.chunk_bytes = 1 + size % 61;
  tiny.gz_block_bytes = 1 + size % 37;
  tessera::fuzz::expect_tessera_errors("read_tns (tiny chunks, automatic base)", [&] {
    check_result(tessera::io::read_tns(path, world, tiny), "tiny chunks");
  });
  return 0;
}

// Corrupt stores found by the fuzz harness of the store reader (tests/fuzz/fuzz_h5store.cpp),
// kept as reproducers in tests/fuzz/corpus/h5store/crash-*.h5: the reader refuses each at
// open with an InputError naming the file and the dataset (before this check, HDF5 1.10 read
// past its own buffer on them). One process.
#include <gtest/gtest.h>

#include <string>

#include "io/h5store.hpp"
#include "util/error.hpp"

namespace tessera::io {
namespace {

const std::string kCorpus = TESSERA_FUZZ_CORPUS_DIR "/h5store/";

std::string open_error(const std::string& path) {
  try {
    H5TensorReader r(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(H5StoreCorrupt, AChunkSmallerThanItsShapeIsRefusedAtOpen) {
  // /coords/mode1's chunk index records 8 bytes for a chunk of 6 uint32 coordinates.
  const std::string path = kCorpus + "crash-chunk-size-smaller-than-chunk.h5";
  const std::string msg = open_error(path);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("dataset '/coords/mode1' has a chunk of 8 bytes at element 0, expected 24"),
            std::string::npos)
      << msg;
}

TEST(H5StoreCorrupt, TheSeedStoresStillOpen) {
  // The valid stores the corrupt one was mutated from (chunked, float32, deflated,
  // partitioned, one mode) open and read without error.
  for (const char* name :
       {"basic.h5", "chunk2_f32.h5", "deflate.h5", "partitioned.h5", "order1.h5"}) {
    H5TensorReader r(kCorpus + name);
    SparseTensor<double> x;
    r.read(0, r.info().nnz, &x);
    EXPECT_EQ(x.nnz(), r.info().nnz) << name;
    EXPECT_GT(x.nnz(), 0) << name;
  }
}

}  // namespace
}  // namespace tessera::io

// Corrupt stores found by the fuzz harness of the store reader (tests/fuzz/fuzz_h5store.cpp),
// kept as reproducers in tests/fuzz/corpus/h5store/crash-*.h5: the reader refuses each at
// open, or before HDF5 reads the damaged chunk, with an InputError naming the file and the
// dataset (before these checks, HDF5 1.10 read past its own buffer on them). One process.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "io/h5/dataset.hpp"
#include "io/h5/file.hpp"
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

TEST(H5StoreCorrupt, AChunkIndexThatDisagreesWithItselfIsRefusedAtOpen) {
  // /coords/mode0's B-tree counts 3 chunks, but its only stored chunk lies at address 0
  // (the superblock) and the other two have none; HDF5 1.10 read past an 8-byte buffer.
  const std::string path = kCorpus + "crash-chunk-index-at-address-zero.h5";
  const std::string msg = open_error(path);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("dataset '/coords/mode0' has no stored chunk at element 0"), std::string::npos)
      << msg;
}

TEST(H5StoreCorrupt, AChunkStoredShortIsRefusedBeforeHdf5ReadsIt) {
  // A chunk of the deflated /coords/mode0 whose filter mask says deflate was skipped
  // (stored as it is) but which stores 14 of its 16 bytes: HDF5 1.10 copied 16 bytes out of
  // its 14-byte buffer. Each compressed chunk is now read raw and measured (inflated where
  // it is deflated) before HDF5 reads it (io/h5/filter.hpp).
  const std::string path = kCorpus + "crash-skipped-deflate-chunk-short.h5";
  std::string msg;
  try {
    H5TensorReader r(path);
    SparseTensor<double> x;
    r.read(0, r.info().nnz, &x);
  } catch (const InputError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot read /coords/mode0[0..6): the dataset has a chunk stored "
                     "uncompressed in 14 bytes, not its 16"),
            std::string::npos)
      << msg;
}

/// A file with one uint32 dataset of 8 elements in two chunks of 4 (shuffle, then deflate),
/// chunk 1 written raw as zlib's stream of `chunk1_bytes` bytes; read whole through the HDF5
/// layer. Returns the error ("" when it reads).
std::string read_with_chunk1_of(std::size_t chunk1_bytes) {
  const std::string path =
      ::testing::TempDir() + "tessera_chunk_" + std::to_string(chunk1_bytes) + ".h5";
  {
    h5::Handle f = h5::create_file(path, H5F_ACC_TRUNC);
    const h5::Handle dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE));
    const hsize_t chunk = 4;
    H5Pset_chunk(dcpl, 1, &chunk);
    H5Pset_shuffle(dcpl);
    H5Pset_deflate(dcpl, 1);
    const h5::Handle d = h5::create_dataset(f, "x", H5T_STD_U32LE, {8}, path, dcpl);
    for (hsize_t k = 0; k < 2; ++k) {
      const std::vector<unsigned char> raw(k == 0 ? 16 : chunk1_bytes, 7);
      std::vector<unsigned char> z(compressBound(raw.size()));
      uLongf len = z.size();
      compress2(z.data(), &len, raw.data(), raw.size(), 1);
      const hsize_t at = k * chunk;
      EXPECT_GE(H5Dwrite_chunk(d, H5P_DEFAULT, 0, &at, len, z.data()), 0);
    }
    h5::close_file(f, path);
  }
  std::string msg;
  try {
    const h5::Handle f = h5::open_file(path, H5F_ACC_RDONLY);
    const h5::Handle d = h5::dataset(H5Dopen2(f, "x", H5P_DEFAULT));
    std::vector<std::uint32_t> v(8);
    h5::read_all(d, H5T_NATIVE_UINT32, v.data(), "x", path);
  } catch (const InputError& e) {
    msg = e.what();
  }
  std::remove(path.c_str());
  return msg;
}

TEST(H5StoreCorrupt, ACompressedChunkMustInflateToExactlyItsBytes) {
  EXPECT_EQ(read_with_chunk1_of(16), "");
  for (const std::size_t n : {std::size_t(14), std::size_t(20)}) {
    const std::string msg = read_with_chunk1_of(n);
    EXPECT_NE(msg.find("dataset 'x' has a compressed chunk that does not inflate to its 16 bytes"),
              std::string::npos)
        << n << ": " << msg;
  }
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

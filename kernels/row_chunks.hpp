// Row chunks of a rows x C matrix, seen as double: the host wide products of the backend
// (kernels/reference/tucker_dense.cpp) and the ScaLAPACK copy of Tucker
// (src/engine/algo/tucker_scalapack.cpp) run BLAS in double on float rows too, converting one chunk
// at a time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace tessera::kernels {

/// Rows per chunk of for_double_row_chunks.
inline constexpr std::int64_t kDoubleChunkRows = 2048;

/// Calls f(rows_as_double, first_row, nrows) on consecutive chunks of kDoubleChunkRows rows
/// of Y (rows x C, row-major): Y itself for double, a converted copy in `buf` for float.
template <typename T, typename F>
void for_double_row_chunks(const T* Y, std::int64_t rows, std::int64_t C, std::vector<double>& buf,
                           F&& f) {
  for (std::int64_t r0 = 0; r0 < rows; r0 += kDoubleChunkRows) {
    const std::int64_t nr = std::min(kDoubleChunkRows, rows - r0);
    if constexpr (std::is_same_v<T, double>) {
      f(Y + r0 * C, r0, nr);
    } else {
      buf.resize(static_cast<std::size_t>(nr * C));
      const T* src = Y + r0 * C;
      const std::int64_t n = nr * C;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (std::int64_t k = 0; k < n; ++k)
        buf[static_cast<std::size_t>(k)] = static_cast<double>(src[k]);
      f(buf.data(), r0, nr);
    }
  }
}

}  // namespace tessera::kernels

// The row-wise factor update of constrained, regularised or weighted CP (linalg::row_update,
// whose comment is the contract): one declaration, implemented by every backend
// (kernels/ops/common.hpp; cuda: kernels/cuda/dense/row_update.cu).
#pragma once

#include <cstdint>

#include "kernels/ops/common.hpp"
#include "linalg/row_update.hpp"

/// A (rows x R) from M and the shared V or the rows' packed Grams Gp; returns the rows that
/// needed a ridge; *host_quad (if given, with Gp) = sum_i a_i^T G_i a_i in double.
#define TESSERA_ROW_UPDATE_OP(T)                                                                  \
  std::int64_t row_update(Backend<T>& be, T* A, const T* M, std::int64_t rows, int R, const T* V, \
                          const T* Gp, const linalg::RowUpdate& u, double* host_quad)

namespace tessera::kernels {

TESSERA_DECLARE_OP(TESSERA_ROW_UPDATE_OP)

namespace ops {
template <typename T>
inline TESSERA_ROW_UPDATE_OP(T) {
  TESSERA_DISPATCH(be, row_update, A, M, rows, R, V, Gp, u, host_quad);
}
}  // namespace ops
}  // namespace tessera::kernels

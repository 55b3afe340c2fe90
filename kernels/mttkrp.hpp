// MTTKRP: out = X_(n) * (A_N ⊙ ... ⊙ A_{n+1} ⊙ A_{n-1} ⊙ ... ⊙ A_1), per backend.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.hpp"
#include "tensor/sparse_tensor.hpp"

namespace tessera::kernels {

namespace reference {
/// Plain loops over the COO nonzeros; the ground truth. out is dims[mode] x R, overwritten.
template <typename T>
void mttkrp(const SparseTensor<T>& x, int mode, const std::vector<const T*>& factors, int R,
            T* out);
}  // namespace reference

namespace cpu {
/// Compressed sparse fiber trees, one per mode (root = that mode), for OpenMP MTTKRP
/// with fiber reuse and no atomics.
template <typename T>
class CsfSet;
template <typename T>
std::unique_ptr<CsfSet<T>> build_csf(const SparseTensor<T>& x);
template <typename T>
void mttkrp(const CsfSet<T>& x, int mode, const std::vector<const T*>& factors, int R, T* out);
}  // namespace cpu

}  // namespace tessera::kernels

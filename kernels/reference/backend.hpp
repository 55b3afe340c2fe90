// Internal to the reference backend: its executor (host memory) and its tensor handle (a copy
// of the COO tensor). The operations (kernels/ops/) are defined in this folder as
// reference::<name>(Backend<T>&, ...): plain loops (mttkrp.cpp, ttmc.cpp, sptc.cpp), the
// tessera::linalg dense operations run serially (dense_ops.cpp), the host loops and
// BLAS/LAPACK calls of Tucker's dense stage (tucker_dense.cpp) and the host memory tier 3
// (accumulate.cpp). The cpu backend runs the last two through the same definitions.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/mttkrp.hpp"
#include "util/error.hpp"

namespace tessera::kernels::reference {

/// A copy of the COO tensor, the reference backend's "format".
template <typename T>
class ReferenceTensor final : public TensorHandle<T> {
 public:
  explicit ReferenceTensor(const SparseTensor<T>& x) : x_(x) {}
  int order() const override { return x_.order(); }
  const std::vector<std::uint64_t>& dims() const override { return x_.dims; }
  nnz_t nnz() const override { return x_.nnz(); }
  std::size_t bytes() const override {
    return static_cast<std::size_t>(x_.nnz()) *
           (static_cast<std::size_t>(x_.order()) * sizeof(index_t) + sizeof(T));
  }
  std::size_t mttkrp_stream_bytes(int) const override { return bytes(); }
  std::vector<std::uint64_t> distinct_rows() const override {
    std::vector<std::uint64_t> out(static_cast<std::size_t>(x_.order()), 0);
    for (int n = 0; n < x_.order(); ++n) {
      std::vector<char> seen(static_cast<std::size_t>(x_.dims[static_cast<std::size_t>(n)]), 0);
      for (index_t i : x_.idx[static_cast<std::size_t>(n)])
        if (!seen[i]) {
          seen[i] = 1;
          ++out[static_cast<std::size_t>(n)];
        }
    }
    return out;
  }
  double value_norm_squared() const override { return x_.norm_squared(); }
  double value_norm() const override { return x_.norm(); }
  int tier() const override { return 1; }
  std::string describe() const override {
    return "tier 1: host-resident, " + std::to_string(bytes()) + " bytes (reference COO)";
  }
  double overlap_fraction() const override { return 1.0; }
  double last_copy_seconds() const override { return 0.0; }
  double last_compute_seconds() const override { return last_compute_; }
  void record_compute(double seconds) const { last_compute_ = seconds; }
  const SparseTensor<T>& coo() const { return x_; }

 private:
  SparseTensor<T> x_;
  mutable double last_compute_ = 0;  ///< seconds of the last mttkrp
};

/// The reference executor: host memory (new[]), no streams. The memory budget is recorded
/// only (Backend::set_memory_budget): the reference format is host-resident.
template <typename T>
class ReferenceBackend final : public Backend<T> {
 public:
  BackendKind kind() const override { return BackendKind::reference; }
  std::string name() const override { return "reference"; }
  MemorySpace memory_space() const override { return MemorySpace::host; }

  Array<T> allocate(std::size_t n) override {
    T* p = new T[n == 0 ? 1 : n];
    return Array<T>(p, n, [](T* q) { delete[] q; });
  }
  void upload(const T* host, std::size_t n, T* dst) override { copy(host, n, dst); }
  void download(const T* src, std::size_t n, T* host) override { copy(src, n, host); }
  void copy(const T* src, std::size_t n, T* dst) override {
    if (n != 0 && src != dst) std::memmove(dst, src, n * sizeof(T));
  }
  void fill(T* dst, std::size_t n, T value) override { std::fill(dst, dst + n, value); }

  std::unique_ptr<TensorHandle<T>> prepare(const SparseTensor<T>& x) override {
    check_kernel_input(x);
    return std::make_unique<ReferenceTensor<T>>(x);
  }
};

/// x as a handle of the reference backend; throws Error for a handle of another backend.
template <typename T>
const ReferenceTensor<T>& reference_handle(const TensorHandle<T>& x) {
  const auto* h = dynamic_cast<const ReferenceTensor<T>*>(&x);
  TESSERA_EXPECTS(h != nullptr, "tensor handle was prepared by another backend");
  return *h;
}

}  // namespace tessera::kernels::reference

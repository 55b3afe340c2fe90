// Internal to the cpu backend: its executor (aligned host memory, an OpenMP team of
// `threads`, the instruction set of the MTTKRP) and its tensor handle (the CSF trees,
// kernels/cpu/csf.hpp). The operations (kernels/ops/) are defined as cpu::<name>(Backend<T>&,
// ...) in kernels/cpu/ops.cpp and dense_ops.cpp; where the cpu backend has no version of its
// own they call the reference backend's host version.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/csf.hpp"
#include "kernels/cpu/team.hpp"
#include "kernels/mttkrp.hpp"
#include "util/error.hpp"

namespace tessera::kernels::cpu {

template <typename T>
class CpuTensor final : public TensorHandle<T> {
 public:
  explicit CpuTensor(std::unique_ptr<CsfSet<T>> csf) : csf_(std::move(csf)) {}
  int order() const override { return csf_->order(); }
  const std::vector<std::uint64_t>& dims() const override { return csf_->dims(); }
  nnz_t nnz() const override { return csf_->nnz(); }
  std::size_t bytes() const override { return csf_->bytes(); }
  std::size_t mttkrp_stream_bytes(int mode) const override {
    TESSERA_EXPECTS(mode >= 0 && mode < order(), "mode " << mode << " outside 0.." << order() - 1);
    return csf_->tree(mode).stream_bytes();
  }
  /// The root level of mode n's tree lists its indices in sorted order: count the runs.
  std::vector<std::uint64_t> distinct_rows() const override {
    std::vector<std::uint64_t> out(static_cast<std::size_t>(order()), 0);
    if (nnz() == 0) return out;
    for (int n = 0; n < order(); ++n) {
      const auto& f = csf_->tree(n).fids[0];
      std::uint64_t c = 0;
      for (std::size_t k = 0; k < f.size(); ++k)
        if (k == 0 || f[k] != f[k - 1]) ++c;
      out[static_cast<std::size_t>(n)] = c;
    }
    return out;
  }
  /// Every tree holds all values (in its leaf order): sum those of mode 0's, in order.
  double value_norm_squared() const override {
    double s = 0;
    if (order() == 0) return s;
    for (T v : csf_->tree(0).vals) s += static_cast<double>(v) * static_cast<double>(v);
    return s;
  }
  /// As SparseTensor::norm() over mode 0's values (scaled: no overflow or underflow).
  double value_norm() const override {
    if (order() == 0) return 0;
    const auto& v = csf_->tree(0).vals;
    return scaled_norm(v.data(), v.size());
  }
  int tier() const override { return 1; }
  std::string describe() const override {
    return "tier 1: host-resident, " + std::to_string(bytes()) + " bytes (CSF, one tree per mode)";
  }
  double overlap_fraction() const override { return 1.0; }
  double last_copy_seconds() const override { return 0.0; }
  double last_compute_seconds() const override { return last_compute_; }
  void record_compute(double seconds) const { last_compute_ = seconds; }
  const CsfSet<T>& csf() const { return *csf_; }

 private:
  std::unique_ptr<CsfSet<T>> csf_;
  mutable double last_compute_ = 0;  ///< seconds of the last mttkrp
};

/// The cpu executor. The memory budget is recorded only (Backend::set_memory_budget): the
/// CSF is host-resident.
template <typename T>
class CpuBackend final : public Backend<T> {
 public:
  static constexpr std::size_t kAlign = 64;  // one cache line; full AVX-512 vectors

  explicit CpuBackend(int threads) : threads_(std::max(0, threads)) {}
  BackendKind kind() const override { return BackendKind::cpu; }
  std::string name() const override { return "cpu"; }
  MemorySpace memory_space() const override { return MemorySpace::host; }
  /// Also refuses an instruction set this CPU or build does not run (InputError naming
  /// --cpu-isa), before any kernel does.
  void set_tuning(const Tuning& t) override {
    check(t);
    const Isa chosen = t.cpu_isa;
    TESSERA_INPUT_CHECK(isa_supported(chosen),
                        "--cpu-isa " << name_of(t.cpu_isa)
                                     << ": this CPU or this build does not run it (auto picks "
                                     << to_string(isa_selected()) << " here)");
    Backend<T>::set_tuning(t);
    isa_ = chosen;
  }

  Array<T> allocate(std::size_t n) override {
    void* p = ::operator new[](std::max<std::size_t>(n, 1) * sizeof(T), std::align_val_t{kAlign});
    return Array<T>(static_cast<T*>(p), n,
                    [](T* q) { ::operator delete[](q, std::align_val_t{kAlign}); });
  }
  void upload(const T* host, std::size_t n, T* dst) override { copy(host, n, dst); }
  void download(const T* src, std::size_t n, T* host) override { copy(src, n, host); }
  void copy(const T* src, std::size_t n, T* dst) override {
    if (n != 0 && src != dst) std::memmove(dst, src, n * sizeof(T));
  }
  void fill(T* dst, std::size_t n, T value) override {
    const int nt = n < (std::size_t{1} << 20) ? 1 : team();
#pragma omp parallel for num_threads(nt) schedule(static)
    for (std::size_t k = 0; k < n; ++k) dst[k] = value;
  }

  std::unique_ptr<TensorHandle<T>> prepare(const SparseTensor<T>& x) override {
    return std::make_unique<CpuTensor<T>>(build_csf(x, threads_));
  }

  /// The OpenMP team size given at creation (0: OpenMP's default at each call).
  int threads() const {
    return threads_;
  }
  /// The MTTKRP's instruction set (Tuning::cpu_isa).
  Isa isa() const {
    return isa_;
  }
  /// The OpenMP team its kernels use: threads(), or OpenMP's default when 0.
  int team() const {
    return team_size(threads_);
  }

 private:
  int threads_;               ///< 0: OpenMP's default at each call
  Isa isa_ = Isa::automatic;  ///< Tuning::cpu_isa
};

/// The OpenMP team of `be`, a cpu backend (CpuBackend::team).
template <typename T>
int team_of(const Backend<T>& be) {
  return static_cast<const CpuBackend<T>&>(be).team();
}

/// x as a handle of the cpu backend; throws Error for a handle of another backend.
template <typename T>
const CpuTensor<T>& cpu_handle(const TensorHandle<T>& x) {
  const auto* h = dynamic_cast<const CpuTensor<T>*>(&x);
  TESSERA_EXPECTS(h != nullptr, "tensor handle was prepared by another backend");
  return *h;
}

}  // namespace tessera::kernels::cpu

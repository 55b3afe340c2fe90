// CPU backend: host memory, OpenMP CSF MTTKRP (kernels/cpu/mttkrp.cpp) and the
// tessera::linalg dense operations, every parallel region capped at `threads`.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>

#include "kernels/cpu/csf.hpp"
#include "kernels/factories.hpp"
#include "kernels/mttkrp.hpp"
#include "kernels/sptc.hpp"
#include "kernels/ttmc.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace tessera::kernels {

namespace {

constexpr std::size_t kAlign = 64;  // one cache line; full AVX-512 vectors

/// Tuning::cpu_isa (checked by kernels::check) as the MTTKRP's instruction set.
cpu::Isa parse_cpu_isa(const std::string& s) {
  if (s == "base") return cpu::Isa::base;
  if (s == "avx2") return cpu::Isa::avx2;
  if (s == "avx512") return cpu::Isa::avx512;
  return cpu::Isa::automatic;
}

template <typename T>
class CpuTensor final : public TensorHandle<T> {
 public:
  explicit CpuTensor(std::unique_ptr<cpu::CsfSet<T>> csf) : csf_(std::move(csf)) {}
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
  const cpu::CsfSet<T>& csf() const { return *csf_; }

 private:
  std::unique_ptr<cpu::CsfSet<T>> csf_;
  mutable double last_compute_ = 0;  ///< seconds of the last mttkrp
};

template <typename T>
class CpuBackend final : public Backend<T> {
 public:
  explicit CpuBackend(int threads) : threads_(std::max(0, threads)) {}
  BackendKind kind() const override { return BackendKind::cpu; }
  std::string name() const override { return "cpu"; }
  MemorySpace memory_space() const override { return MemorySpace::host; }
  /// Also refuses an instruction set this CPU or build does not run (InputError naming
  /// --cpu-isa), before any kernel does.
  void set_tuning(const Tuning& t) override {
    check(t);
    const cpu::Isa isa = parse_cpu_isa(t.cpu_isa);
    TESSERA_INPUT_CHECK(cpu::isa_supported(isa),
                        "--cpu-isa " << t.cpu_isa
                                     << ": this CPU or this build does not run it (auto picks "
                                     << cpu::to_string(cpu::isa_selected()) << " here)");
    Backend<T>::set_tuning(t);
    isa_ = isa;
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

  void set_memory_budget(std::size_t bytes) override {
    budget_ = bytes;
  }
  std::size_t memory_budget() const override {
    return budget_;
  }
  std::unique_ptr<TensorHandle<T>> prepare(const SparseTensor<T>& x) override {
    return std::make_unique<CpuTensor<T>>(cpu::build_csf(x, threads_));
  }
  void mttkrp(const TensorHandle<T>& x, int mode, const std::vector<const T*>& factors, int R,
              T* out) override {
    const auto* h = dynamic_cast<const CpuTensor<T>*>(&x);
    TESSERA_EXPECTS(h != nullptr, "tensor handle was prepared by another backend");
    cpu::MttkrpOptions opt;
    opt.threads = threads_;
    opt.isa = isa_;
    Timer t;
    cpu::mttkrp(h->csf(), mode, factors, R, out, opt);
    h->record_compute(t.seconds());
  }
  // TTMc runs on the CSF trees the handle keeps for MTTKRP (a borrowing plan, O(order)).
  std::vector<index_t> ttmc_rows(const TensorHandle<T>& x, int mode) override {
    return cpu::ttmc_rows(cpu::TtmcPlan<T>(cpu_handle(x).csf(), threads_), mode);
  }
  std::size_t ttmc_scratch_bytes(const TensorHandle<T>& x, int mode,
                                 const std::vector<int>& ranks) override {
    return cpu::ttmc_scratch_bytes(cpu::TtmcPlan<T>(cpu_handle(x).csf(), threads_), mode, ranks);
  }
  void ttmc(const TensorHandle<T>& x, int mode, const std::vector<const T*>& factors,
            const std::vector<int>& ranks, T* out) override {
    const auto& h = cpu_handle(x);
    Timer t;
    cpu::ttmc_into(cpu::TtmcPlan<T>(h.csf(), threads_), mode, factors, ranks, out);
    h.record_compute(t.seconds());
  }
  std::unique_ptr<ContractPlan<T>> contract_plan(const SparseTensor<T>& x, const SparseTensor<T>& y,
                                                 const ContractSpec& spec) override {
    cpu::ContractOptions o;
    o.threads = threads_;
    return cpu::plan_contract(x, y, spec, o);
  }
  SparseTensor<T> contract(ContractPlan<T>& plan, ContractStats* stats) override {
    return cpu::contract(plan, stats);
  }
  static const CpuTensor<T>& cpu_handle(const TensorHandle<T>& x) {
    const auto* h = dynamic_cast<const CpuTensor<T>*>(&x);
    TESSERA_EXPECTS(h != nullptr, "tensor handle was prepared by another backend");
    return *h;
  }

  void gram(const T* A, std::int64_t rows, int R, T* G) override {
    linalg::gram(A, rows, R, G, threads_);
  }
  void hadamard(const std::vector<const T*>& Gs, int R, T* V) override {
    linalg::hadamard(Gs, R, V);
  }
  bool solve_normal(T* M, std::int64_t rows, const T* V, int R) override {
    return linalg::solve_normal(M, rows, V, R, threads_);
  }
  void column_norms(const T* A, std::int64_t rows, int R, NormKind kind,
                    double* host_out) override {
    linalg::column_norms(A, rows, R, kind, host_out, threads_);
  }
  void scale_columns(T* A, std::int64_t rows, int R, const double* host_scale) override {
    linalg::scale_columns(A, rows, R, host_scale, threads_);
  }
  void column_dots(const T* A, const T* B, std::int64_t rows, int R, double* host_out) override {
    linalg::column_dots(A, B, rows, R, host_out, threads_);
  }
  void pack_outer(const T* A, std::int64_t rows, int R, T* P) override {
    linalg::pack_outer(A, rows, R, P, threads_);
  }
  std::int64_t row_update(T* A, const T* M, std::int64_t rows, int R, const T* V, const T* Gp,
                          const linalg::RowUpdate& u, double* host_quad) override {
    return linalg::row_update(A, M, rows, R, V, Gp, u, host_quad, threads_);
  }

 private:
  int team() const {
    return threads_ > 0 ? threads_ : omp_get_max_threads();
  }
  int threads_;                         ///< 0: OpenMP's default at each call
  cpu::Isa isa_ = cpu::Isa::automatic;  ///< Tuning::cpu_isa
  std::size_t budget_ = 0;              ///< recorded only: the CSF is host-resident
};

}  // namespace

template <typename T>
std::unique_ptr<Backend<T>> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend<T>>(threads);
}

template std::unique_ptr<Backend<float>> make_cpu_backend<float>(int);
template std::unique_ptr<Backend<double>> make_cpu_backend<double>(int);

}  // namespace tessera::kernels

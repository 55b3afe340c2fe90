// Reference backend: host memory, plain loops (kernels/reference/mttkrp.cpp) and the
// tessera::linalg dense operations. The ground truth the other backends are tested against.
#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "kernels/factories.hpp"
#include "kernels/mttkrp.hpp"
#include "kernels/sptc.hpp"
#include "kernels/ttmc.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace tessera::kernels {

namespace {

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

  void set_memory_budget(std::size_t bytes) override { budget_ = bytes; }
  std::size_t memory_budget() const override { return budget_; }
  std::unique_ptr<TensorHandle<T>> prepare(const SparseTensor<T>& x) override {
    check_kernel_input(x);
    return std::make_unique<ReferenceTensor<T>>(x);
  }
  void mttkrp(const TensorHandle<T>& x, int mode, const std::vector<const T*>& factors, int R,
              T* out) override {
    const auto* h = dynamic_cast<const ReferenceTensor<T>*>(&x);
    TESSERA_EXPECTS(h != nullptr, "tensor handle was prepared by another backend");
    Timer t;
    reference::mttkrp(h->coo(), mode, factors, R, out);
    h->record_compute(t.seconds());
  }
  std::vector<index_t> ttmc_rows(const TensorHandle<T>& x, int mode) override {
    const auto& c = coo_of(x);
    TESSERA_EXPECTS(mode >= 0 && mode < c.order(),
                    "mode " << mode << " outside 0.." << c.order() - 1);
    std::vector<index_t> rows = c.idx[static_cast<std::size_t>(mode)];
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    return rows;
  }
  std::size_t ttmc_scratch_bytes(const TensorHandle<T>& x, int mode,
                                 const std::vector<int>& ranks) override {
    const auto rows = static_cast<std::int64_t>(ttmc_rows(x, mode).size());
    // reference::ttmc returns a fresh output that is copied into `out`.
    return reference::ttmc_scratch_bytes(rows, ranks, mode) +
           ttmc_output_bytes(rows, ranks, mode, sizeof(T));
  }
  void ttmc(const TensorHandle<T>& x, int mode, const std::vector<const T*>& factors,
            const std::vector<int>& ranks, T* out) override {
    const auto& c = coo_of(x);
    Timer t;
    const SemiSparse<T> y = reference::ttmc(c, mode, factors, ranks);
    std::copy(y.data.begin(), y.data.end(), out);
    static_cast<const ReferenceTensor<T>&>(x).record_compute(t.seconds());
  }
  std::unique_ptr<ContractPlan<T>> contract_plan(const SparseTensor<T>& x, const SparseTensor<T>& y,
                                                 const ContractSpec& spec) override {
    return reference::plan_contract(x, y, spec);
  }
  SparseTensor<T> contract(ContractPlan<T>& plan, ContractStats* stats) override {
    return reference::contract(plan, stats);
  }
  static const SparseTensor<T>& coo_of(const TensorHandle<T>& x) {
    const auto* h = dynamic_cast<const ReferenceTensor<T>*>(&x);
    TESSERA_EXPECTS(h != nullptr, "tensor handle was prepared by another backend");
    return h->coo();
  }

  void gram(const T* A, std::int64_t rows, int R, T* G) override { linalg::gram(A, rows, R, G); }
  void hadamard(const std::vector<const T*>& Gs, int R, T* V) override {
    linalg::hadamard(Gs, R, V);
  }
  bool solve_normal(T* M, std::int64_t rows, const T* V, int R) override {
    return linalg::solve_normal(M, rows, V, R);
  }
  void column_norms(const T* A, std::int64_t rows, int R, NormKind kind,
                    double* host_out) override {
    linalg::column_norms(A, rows, R, kind, host_out);
  }
  void scale_columns(T* A, std::int64_t rows, int R, const double* host_scale) override {
    linalg::scale_columns(A, rows, R, host_scale);
  }
  void column_dots(const T* A, const T* B, std::int64_t rows, int R, double* host_out) override {
    linalg::column_dots(A, B, rows, R, host_out);
  }
  void pack_outer(const T* A, std::int64_t rows, int R, T* P) override {
    linalg::pack_outer(A, rows, R, P, 1);
  }
  std::int64_t row_update(T* A, const T* M, std::int64_t rows, int R, const T* V, const T* Gp,
                          const linalg::RowUpdate& u, double* host_quad) override {
    return linalg::row_update(A, M, rows, R, V, Gp, u, host_quad, 1);
  }

 private:
  std::size_t budget_ = 0;  ///< recorded only: the reference format is host-resident
};

}  // namespace

template <typename T>
std::unique_ptr<Backend<T>> make_reference_backend() {
  return std::make_unique<ReferenceBackend<T>>();
}

template std::unique_ptr<Backend<float>> make_reference_backend<float>();
template std::unique_ptr<Backend<double>> make_reference_backend<double>();

}  // namespace tessera::kernels

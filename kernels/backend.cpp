#include "kernels/backend.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/factories.hpp"
#include "kernels/row_chunks.hpp"
#include "kernels/sptc.hpp"
#include "linalg/blas.hpp"
#include "tensor/synthetic.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace tessera::kernels {

BackendKind parse_backend(const std::string& name) {
  if (name == "reference") return BackendKind::reference;
  if (name == "cpu") return BackendKind::cpu;
  if (name == "cuda") return BackendKind::cuda;
  if (name == "auto") return cuda_device_available() ? BackendKind::cuda : BackendKind::cpu;
  TESSERA_INPUT_CHECK(false,
                      "unknown backend '" << name << "': expected auto, reference, cpu or cuda");
  return BackendKind::cpu;
}

std::string to_string(BackendKind k) {
  switch (k) {
    case BackendKind::reference:
      return "reference";
    case BackendKind::cpu:
      return "cpu";
    case BackendKind::cuda:
      return "cuda";
  }
  return "?";
}

bool cuda_device_available() {
  return cuda_built() && cuda_device_count() > 0;
}

template <typename T>
std::unique_ptr<Backend<T>> make_backend(BackendKind kind, int threads) {
  switch (kind) {
    case BackendKind::reference:
      return make_reference_backend<T>();
    case BackendKind::cpu:
      return make_cpu_backend<T>(threads);
    case BackendKind::cuda:
      return make_cuda_backend<T>();
  }
  TESSERA_THROW("unknown backend kind");
}

void check_synthetic(const synthetic::Spec& spec, std::uint64_t first_id, std::uint64_t count) {
  TESSERA_INPUT_CHECK(
      spec.order >= 1 && spec.order <= kMaxOrder,
      "synthetic tensor: order must be 1.." << kMaxOrder << " (got " << spec.order << ")");
  for (int n = 0; n < spec.order; ++n)
    TESSERA_INPUT_CHECK(
        spec.dims[n] >= 1 && spec.dims[n] <= (std::uint64_t(1) << 32),
        "synthetic tensor: dimension " << n << " is " << spec.dims[n] << ", outside 1..2^32");
  TESSERA_INPUT_CHECK(spec.rank >= 1, "synthetic tensor: model rank " << spec.rank << " < 1");
  TESSERA_INPUT_CHECK(
      !spec.powerlaw || (spec.alpha > 0 && spec.alpha < 1e300),
      "synthetic tensor: power-law exponent must be > 0 (got " << spec.alpha << ")");
  TESSERA_INPUT_CHECK(count <= static_cast<std::uint64_t>(std::numeric_limits<nnz_t>::max()) &&
                          first_id <= std::numeric_limits<std::uint64_t>::max() - count,
                      "synthetic tensor: id range [" << first_id << ", " << first_id << " + "
                                                     << count << ") out of range");
}

template <typename T>
SparseTensor<T> make_synthetic_tensor(const synthetic::Spec& spec, std::uint64_t first_id,
                                      std::uint64_t count) {
  check_synthetic(spec, first_id, count);
  const int N = spec.order;
  SparseTensor<T> x(std::vector<std::uint64_t>(spec.dims, spec.dims + N));
  const auto n = static_cast<std::size_t>(count);
  for (auto& v : x.idx) v.resize(n);
  x.vals.resize(n);
  const auto cnt = static_cast<std::int64_t>(count);
#pragma omp parallel for schedule(static)
  for (std::int64_t k = 0; k < cnt; ++k) {
    const std::uint64_t id = first_id + static_cast<std::uint64_t>(k);
    index_t c[kMaxOrder];
    for (int m = 0; m < N; ++m) {
      c[m] = synthetic::coordinate(spec, id, m);
      x.idx[static_cast<std::size_t>(m)][static_cast<std::size_t>(k)] = c[m];
    }
    x.vals[static_cast<std::size_t>(k)] = static_cast<T>(synthetic::model_value(spec, c));
  }
  return x;
}

template <typename T>
std::unique_ptr<TensorHandle<T>> Backend<T>::prepare_synthetic(const synthetic::Spec& spec,
                                                               std::uint64_t first_id,
                                                               std::uint64_t count) {
  return prepare(make_synthetic_tensor<T>(spec, first_id, count));
}

template <typename T>
int Backend<T>::prepare_stream_chunk(SparseTensor<T>&) {
  return -1;
}

template <typename T>
std::size_t Backend<T>::stream_chunk_scratch_bytes(nnz_t) const {
  return 0;
}

template <typename T>
void Backend<T>::mttkrp_accumulate(const SparseTensor<T>& chunk, int mode,
                                   const std::vector<const T*>& factors, int R, T* out, int) {
  TESSERA_EXPECTS(mode >= 0 && mode < chunk.order(), "mttkrp_accumulate: mode "
                                                         << mode << " of an order-" << chunk.order()
                                                         << " chunk");
  TESSERA_EXPECTS(R >= 1, "mttkrp_accumulate: rank R = " << R);
  if (chunk.nnz() == 0) return;
  Timer t;
  const auto rows = static_cast<std::int64_t>(chunk.dims[static_cast<std::size_t>(mode)]);
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(R);
  if (accumulate_scratch_.size() < n) {
    accumulate_scratch_ = Array<T>();  // free first: the old buffer is too small
    accumulate_scratch_ = allocate(n);
  }
  {
    auto h = prepare(chunk);
    mttkrp(*h, mode, factors, R, accumulate_scratch_.data());
    add_rows(accumulate_scratch_.data(), rows, R, {}, out);
    synchronize();  // the chunk's handle is released after this
  }
  accumulate_times_.compute += t.seconds();
  ++accumulate_times_.chunks;
}

template <typename T>
AccumulateTimes Backend<T>::take_accumulate_times() {
  synchronize();
  const AccumulateTimes t = accumulate_times_;
  accumulate_times_ = AccumulateTimes{};
  return t;
}

template <typename T>
std::vector<index_t> Backend<T>::ttmc_rows(const TensorHandle<T>&, int) {
  TESSERA_THROW("ttmc is not implemented by the " << name() << " backend yet");
}
template <typename T>
std::size_t Backend<T>::ttmc_scratch_bytes(const TensorHandle<T>&, int, const std::vector<int>&) {
  TESSERA_THROW("ttmc is not implemented by the " << name() << " backend yet");
}
template <typename T>
void Backend<T>::ttmc(const TensorHandle<T>&, int, const std::vector<const T*>&,
                      const std::vector<int>&, T*) {
  TESSERA_THROW("ttmc is not implemented by the " << name() << " backend yet");
}

// ---- double work buffers and wide products: host defaults ----

template <typename T>
Array<double> Backend<T>::allocate_double(std::size_t n) {
  TESSERA_EXPECTS(memory_space() == comm::MemorySpace::host,
                  "the " << name() << " backend must implement allocate_double");
  if (n == 0) return Array<double>();
  return Array<double>(new double[n], n, [](double* p) { delete[] p; });
}
template <typename T>
void Backend<T>::upload_double(const double* host, std::size_t n, double* dst) {
  if (n > 0 && host != dst) std::memcpy(dst, host, n * sizeof(double));
}
template <typename T>
void Backend<T>::download_double(const double* src, std::size_t n, double* host) {
  if (n > 0 && host != src) std::memcpy(host, src, n * sizeof(double));
}

template <typename T>
void Backend<T>::wide_gram(const T* Y, std::int64_t rows, std::int64_t C, double* S) {
  TESSERA_EXPECTS(memory_space() == comm::MemorySpace::host,
                  "the " << name() << " backend must implement wide_gram");
  std::fill(S, S + C * C, 0.0);
  std::vector<double> buf;
  for_double_row_chunks(Y, rows, C, buf, [&](const double* y, std::int64_t, std::int64_t nr) {
    linalg::syrk_lower(C, nr, 1.0, y, C, 1.0, S);
  });
  linalg::symmetrize_lower(C, S);
}
template <typename T>
void Backend<T>::wide_times(const T* Y, std::int64_t rows, std::int64_t C, const double* W, int R,
                            double* Z) {
  TESSERA_EXPECTS(memory_space() == comm::MemorySpace::host,
                  "the " << name() << " backend must implement wide_times");
  std::vector<double> buf;
  for_double_row_chunks(Y, rows, C, buf, [&](const double* y, std::int64_t r0, std::int64_t nr) {
    linalg::gemm(false, false, nr, R, C, 1.0, y, C, W, R, 0.0, Z + r0 * R, R);
  });
}
template <typename T>
void Backend<T>::wide_times_t(const T* Y, std::int64_t rows, std::int64_t C, const double* P, int R,
                              double* B) {
  TESSERA_EXPECTS(memory_space() == comm::MemorySpace::host,
                  "the " << name() << " backend must implement wide_times_t");
  std::fill(B, B + C * R, 0.0);
  std::vector<double> buf;
  for_double_row_chunks(Y, rows, C, buf, [&](const double* y, std::int64_t r0, std::int64_t nr) {
    linalg::gemm(true, false, C, R, nr, 1.0, y, C, P + r0 * R, R, 1.0, B, R);
  });
}
template <typename T>
void Backend<T>::symmetric_eig_top(double* S, int n, int k, double* w_host, double* V) {
  const auto nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  std::vector<double> Sh(nn), Vh(static_cast<std::size_t>(n) * static_cast<std::size_t>(k));
  download_double(S, nn, Sh.data());
  linalg::symmetric_eig_top(Sh.data(), n, k, w_host, Vh.data());
  upload_double(Vh.data(), Vh.size(), V);
}

template <typename T>
void Backend<T>::sum_rows(const T* src, const std::vector<std::int64_t>& ptr,
                          const std::vector<std::int64_t>& row, std::int64_t C, T* dst) {
  TESSERA_EXPECTS(memory_space() == comm::MemorySpace::host,
                  "the " << name() << " backend must implement sum_rows");
  const auto rows = static_cast<std::int64_t>(ptr.empty() ? 0 : ptr.size() - 1);
#pragma omp parallel for schedule(static) if (rows * C > (1 << 16))
  for (std::int64_t j = 0; j < rows; ++j) {
    T* d = dst + j * C;
    const std::int64_t b0 = ptr[static_cast<std::size_t>(j)],
                       b1 = ptr[static_cast<std::size_t>(j + 1)];
    const T* first = src + row[static_cast<std::size_t>(b0)] * C;
    std::copy(first, first + C, d);
    for (std::int64_t q = b0 + 1; q < b1; ++q) {
      const T* s = src + row[static_cast<std::size_t>(q)] * C;
      for (std::int64_t k = 0; k < C; ++k) d[k] += s[k];
    }
  }
}

template <typename T>
void Backend<T>::add_rows(const T* src, std::int64_t rows, std::int64_t C,
                          const std::vector<std::int64_t>& dst_row, T* dst) {
  TESSERA_EXPECTS(memory_space() == comm::MemorySpace::host,
                  "the " << name() << " backend must implement add_rows");
  TESSERA_EXPECTS(dst_row.empty() || static_cast<std::int64_t>(dst_row.size()) == rows,
                  "add_rows: " << dst_row.size() << " destination rows for " << rows << " rows");
#pragma omp parallel for schedule(static) if (rows * C > (1 << 16))
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t j = dst_row.empty() ? i : dst_row[static_cast<std::size_t>(i)];
    T* d = dst + j * C;
    const T* s = src + i * C;
    for (std::int64_t k = 0; k < C; ++k) d[k] += s[k];
  }
}

template <typename T>
std::size_t Backend<T>::wide_scratch_bytes(std::int64_t C) const {
  return std::is_same_v<T, double>
             ? 0
             : static_cast<std::size_t>(kDoubleChunkRows * C) * sizeof(double);
}

template <typename T>
std::unique_ptr<ContractPlan<T>> Backend<T>::contract_plan(const SparseTensor<T>&,
                                                           const SparseTensor<T>&,
                                                           const ContractSpec&) {
  TESSERA_THROW("contract is not implemented by the " << name() << " backend yet");
}
template <typename T>
SparseTensor<T> Backend<T>::contract(ContractPlan<T>&, ContractStats*) {
  TESSERA_THROW("contract is not implemented by the " << name() << " backend yet");
}

template class Backend<float>;
template class Backend<double>;
template SparseTensor<float> make_synthetic_tensor<float>(const synthetic::Spec&, std::uint64_t,
                                                          std::uint64_t);
template SparseTensor<double> make_synthetic_tensor<double>(const synthetic::Spec&, std::uint64_t,
                                                            std::uint64_t);

template std::unique_ptr<Backend<float>> make_backend<float>(BackendKind, int);
template std::unique_ptr<Backend<double>> make_backend<double>(BackendKind, int);

}  // namespace tessera::kernels

// The executor's shared parts (kernels/backend.hpp): backend names, make_backend, the tuning
// and synthetic-tensor checks, and the host defaults of the executor's memory members. The
// operations are defined per backend (kernels/ops/common.hpp).
#include "kernels/backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/factories.hpp"
#include "tensor/synthetic.hpp"
#include "util/error.hpp"

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
std::unique_ptr<Backend<T>> make_backend(BackendKind kind, int threads, const Tuning& tuning) {
  check(tuning);
  std::unique_ptr<Backend<T>> be;
  switch (kind) {
    case BackendKind::reference:
      be = make_reference_backend<T>();
      break;
    case BackendKind::cpu:
      be = make_cpu_backend<T>(threads);
      break;
    case BackendKind::cuda:
      be = make_cuda_backend<T>();
      break;
  }
  if (!be) TESSERA_THROW("unknown backend kind");
  be->set_tuning(tuning);
  return be;
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

bool is_whole(const synthetic::Spec& spec, const synthetic::Window& w) {
  if (w.relabelled) return false;
  for (int n = 0; n < spec.order; ++n)
    if (w.lo[n] != 0 || w.hi[n] != spec.dims[n]) return false;
  return true;
}

void check_synthetic(const synthetic::Spec& spec, const synthetic::Window& w,
                     std::uint64_t first_id, std::uint64_t count) {
  check_synthetic(spec, first_id, count);
  for (int n = 0; n < spec.order; ++n)
    TESSERA_INPUT_CHECK(w.lo[n] <= w.hi[n] && w.hi[n] <= spec.dims[n],
                        "synthetic tensor: window [" << w.lo[n] << ", " << w.hi[n] << ") of mode "
                                                     << n << " is not inside its " << spec.dims[n]
                                                     << " indices");
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
SparseTensor<T> make_synthetic_tensor(const synthetic::Spec& spec, const synthetic::Window& w,
                                      std::uint64_t first_id, std::uint64_t count) {
  check_synthetic(spec, w, first_id, count);
  if (is_whole(spec, w)) return make_synthetic_tensor<T>(spec, first_id, count);
  const int N = spec.order;
  std::vector<std::uint64_t> dims(static_cast<std::size_t>(N));
  for (int m = 0; m < N; ++m) dims[static_cast<std::size_t>(m)] = w.hi[m] - w.lo[m];
  SparseTensor<T> x(dims);
  // Pass 1 counts each part's kept ids, pass 2 writes them at the part's offset: the
  // entries in id order whatever the thread count.
  const auto cnt = static_cast<std::int64_t>(count);
  const std::int64_t parts = std::max<std::int64_t>(1, std::min<std::int64_t>(cnt / 4096, 4096));
  std::vector<std::int64_t> kept(static_cast<std::size_t>(parts) + 1, 0);
  auto range = [&](std::int64_t p) {
    return std::pair<std::int64_t, std::int64_t>{cnt * p / parts, cnt * (p + 1) / parts};
  };
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t p = 0; p < parts; ++p) {
    index_t c[kMaxOrder];
    double v = 0;
    std::int64_t k = 0;
    for (auto [a, b] = range(p); a < b; ++a)
      k += synthetic::in_window(spec, w, first_id + static_cast<std::uint64_t>(a), c, &v) ? 1 : 0;
    kept[static_cast<std::size_t>(p) + 1] = k;
  }
  for (std::size_t p = 1; p < kept.size(); ++p) kept[p] += kept[p - 1];
  const auto n = static_cast<std::size_t>(kept.back());
  for (auto& v : x.idx) v.resize(n);
  x.vals.resize(n);
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t p = 0; p < parts; ++p) {
    index_t c[kMaxOrder];
    double v = 0;
    auto out = static_cast<std::size_t>(kept[static_cast<std::size_t>(p)]);
    for (auto [a, b] = range(p); a < b; ++a) {
      if (!synthetic::in_window(spec, w, first_id + static_cast<std::uint64_t>(a), c, &v)) continue;
      for (int m = 0; m < N; ++m) x.idx[static_cast<std::size_t>(m)][out] = c[m];
      x.vals[out++] = static_cast<T>(v);
    }
  }
  return x;
}

template SparseTensor<float> make_synthetic_tensor<float>(const synthetic::Spec&,
                                                          const synthetic::Window&, std::uint64_t,
                                                          std::uint64_t);
template SparseTensor<double> make_synthetic_tensor<double>(const synthetic::Spec&,
                                                            const synthetic::Window&, std::uint64_t,
                                                            std::uint64_t);

template <typename T>
std::unique_ptr<TensorHandle<T>> Backend<T>::prepare_synthetic(const synthetic::Spec& spec,
                                                               const synthetic::Window& w,
                                                               std::uint64_t first_id,
                                                               std::uint64_t count) {
  return prepare(make_synthetic_tensor<T>(spec, w, first_id, count));
}

// ---- double work buffers and index maps: host defaults ----

template <typename T>
Array<double> Backend<T>::allocate_double(std::size_t n) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
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
Array<std::int64_t> Backend<T>::upload_index(const std::int64_t* host, std::size_t n) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement upload_index");
  if (n == 0) return Array<std::int64_t>();
  auto* p = new std::int64_t[n];
  std::copy(host, host + n, p);
  return Array<std::int64_t>(p, n, [](std::int64_t* q) { delete[] q; });
}

template class Backend<float>;
template class Backend<double>;
template SparseTensor<float> make_synthetic_tensor<float>(const synthetic::Spec&, std::uint64_t,
                                                          std::uint64_t);
template SparseTensor<double> make_synthetic_tensor<double>(const synthetic::Spec&, std::uint64_t,
                                                            std::uint64_t);

template std::unique_ptr<Backend<float>> make_backend<float>(BackendKind, int, const Tuning&);
template std::unique_ptr<Backend<double>> make_backend<double>(BackendKind, int, const Tuning&);

}  // namespace tessera::kernels

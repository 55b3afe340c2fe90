#include "algo/host_tier.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "kernels/ops/mttkrp.hpp"
#include "util/log.hpp"

namespace tessera::algo {

template <typename T>
HostTensor<T>::HostTensor(SparseTensor<T>&& block, nnz_t chunk_nnz, kernels::Backend<T>* be)
    : dims_(block.dims), nnz_(block.nnz()), chunk_(chunk_nnz) {
  TESSERA_EXPECTS(chunk_nnz >= 1, "HostTensor: chunk_nnz must be >= 1 (got " << chunk_nnz << ")");
  const int N = block.order();
  const nnz_t k = nnz_ == 0 ? 0 : (nnz_ + chunk_ - 1) / chunk_;
  chunks_.reserve(static_cast<std::size_t>(k));
  for (nnz_t c = 0; c < k; ++c) chunks_.emplace_back(dims_);
  // Array by array, so at most one of the block's arrays is held twice.
  auto cut = [&](auto& src, auto dst_of) {
    for (nnz_t c = 0; c < k; ++c) {
      const nnz_t a = c * chunk_, b = std::min(nnz_, a + chunk_);
      auto& dst = dst_of(chunks_[static_cast<std::size_t>(c)]);
      dst.assign(src.begin() + a, src.begin() + b);
    }
    std::decay_t<decltype(src)>().swap(src);
  };
  for (int m = 0; m < N; ++m)
    cut(block.idx[static_cast<std::size_t>(m)], [m](SparseTensor<T>& t) -> std::vector<index_t>& {
      return t.idx[static_cast<std::size_t>(m)];
    });
  cut(block.vals, [](SparseTensor<T>& t) -> std::vector<T>& { return t.vals; });
  block = SparseTensor<T>(dims_);
  summarise(be);
}

template <typename T>
HostTensor<T>::HostTensor(std::vector<SparseTensor<T>>&& chunks, std::vector<std::uint64_t> dims,
                          nnz_t chunk_nnz, kernels::Backend<T>* be)
    : dims_(std::move(dims)), chunk_(chunk_nnz), chunks_(std::move(chunks)) {
  TESSERA_EXPECTS(chunk_nnz >= 1, "HostTensor: chunk_nnz must be >= 1 (got " << chunk_nnz << ")");
  summarise(be);
}

template <typename T>
void HostTensor<T>::summarise(kernels::Backend<T>* be) {
  const int N = order();
  nnz_ = 0;
  norm2_ = 0;
  rows_.assign(static_cast<std::size_t>(N), {});
  for (int m = 0; m < N; ++m) {
    std::vector<char> seen(static_cast<std::size_t>(dims_[static_cast<std::size_t>(m)]), 0);
    for (const auto& c : chunks_)
      for (index_t i : c.idx[static_cast<std::size_t>(m)]) seen[i] = 1;
    auto& r = rows_[static_cast<std::size_t>(m)];
    for (std::size_t i = 0; i < seen.size(); ++i)
      if (seen[i]) r.push_back(static_cast<index_t>(i));
  }
  for (const auto& c : chunks_) {
    nnz_ += c.nnz();
    norm2_ += c.norm_squared();
    norm_ = std::hypot(norm_, c.norm());
  }
  sorted_.assign(chunks_.size(), -1);
  if (be == nullptr) return;
  for (std::size_t k = 0; k < chunks_.size(); ++k)
    sorted_[k] = kernels::ops::prepare_stream_chunk(*be, chunks_[k]);
  pin_buffers(*be);
}

template <typename T>
void HostTensor<T>::pin_buffers(kernels::Backend<T>& be) const {
  if (pinned_for_ == &be || be.kind() != kernels::BackendKind::cuda) return;
  pins_.clear();
  for (const auto& c : chunks_) {
    for (const auto& col : c.idx)
      if (auto h = be.pin_host(col.data(), col.size() * sizeof(index_t)))
        pins_.push_back(std::move(h));
    if (auto h = be.pin_host(c.vals.data(), c.vals.size() * sizeof(T)))
      pins_.push_back(std::move(h));
  }
  pinned_for_ = &be;
}

template <typename T>
void HostTensor<T>::set_backend_times(const kernels::AccumulateTimes& t) const {
  const double wall = pass_.seconds();
  copy_s_ = t.copy;
  compute_s_ = t.compute;
  overlap_ = t.copy > 0 ? std::clamp(1.0 - (wall - t.compute) / t.copy, 0.0, 1.0) : 1.0;
}

template <typename T>
HostTensor<T>::~HostTensor() = default;

template <typename T>
std::size_t HostTensor<T>::bytes() const {
  return static_cast<std::size_t>(nnz_) *
         (static_cast<std::size_t>(order()) * sizeof(index_t) + sizeof(T));
}

template <typename T>
std::size_t HostTensor<T>::mttkrp_stream_bytes(int) const {
  return bytes();
}

template <typename T>
std::vector<std::uint64_t> HostTensor<T>::distinct_rows() const {
  std::vector<std::uint64_t> out;
  for (const auto& r : rows_) out.push_back(r.size());
  return out;
}

template <typename T>
std::string HostTensor<T>::describe() const {
  std::ostringstream os;
  os << "tier 2 (host-resident, streamed): " << nnz_ << " nonzeros in " << chunks_.size()
     << " chunk(s) of " << chunk_ << ", " << bytes() << " bytes"
     << (pins_.empty() ? "" : ", page-locked");
  return os.str();
}

template <typename T>
void HostTensor<T>::stream(const std::function<void(const SparseTensor<T>&)>& f) const {
  pass_.reset();
  for (const auto& c : chunks_) f(c);
}

template <typename T>
void HostTensor<T>::stream_sorted(const std::function<void(const SparseTensor<T>&, int)>& f) const {
  pass_.reset();
  for (std::size_t k = 0; k < chunks_.size(); ++k) f(chunks_[k], sorted_[k]);
}

void log_memory_tier(int tier, const std::string& description, const comm::Communicator& c,
                     bool print) {
  std::int32_t tier_max = tier;
  c.allreduce(&tier_max, 1, comm::ReduceOp::max);
  if (print)
    log::info(
        "memory tier (rank 0): " + description +
        (tier_max != tier ? " (some ranks stream: tier " + std::to_string(tier_max) + ")" : ""));
}

template class HostTensor<float>;
template class HostTensor<double>;

}  // namespace tessera::algo

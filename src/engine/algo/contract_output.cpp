// The caller's side of algo::contract (docs/sptc.md, "Host buffers", "Distribution"):
// ContractBuffers (output arrays reused and page-locked across contractions), gather (a
// distributed result on one rank) and write_sorted (the result to a file in global order).
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "algo/contract.hpp"
#include "io/h5store.hpp"
#include "io/tns.hpp"
#include "kernels/sptc.hpp"
#include "partition/partition.hpp"
#include "util/error.hpp"

namespace tessera::algo {

template <typename T>
ContractBuffers<T>::~ContractBuffers() {
  out_pins_.clear();
  in_pins_.clear();
}

template <typename T>
double ContractBuffers<T>::pin_input(const SparseTensor<T>& t) {
  Timer tm;
  for (const auto& col : t.idx)
    lock(col.data(), col.size() * sizeof(index_t), in_pins_, pinned_in_);
  lock(t.vals.data(), t.vals.size() * sizeof(T), in_pins_, pinned_in_);
  return tm.seconds();
}

template <typename T>
void ContractBuffers<T>::lock(const void* p, std::size_t bytes,
                              std::vector<std::unique_ptr<kernels::HostPin>>& pins,
                              std::size_t& total) {
  constexpr std::size_t kMin = std::size_t{1} << 20;
  if (bytes < kMin) return;
  if (auto h = be_.pin_host(p, bytes)) {
    pins.push_back(std::move(h));
    total += bytes;
  }
}

template <typename T>
SparseTensor<T>& ContractBuffers<T>::output(const std::vector<std::uint64_t>& dims, std::size_t n) {
  if (out_.idx.size() != dims.size() || n > cap_) {
    out_pins_.clear();  // unlocked before the old storage is released
    pinned_out_ = 0;
    out_ = SparseTensor<T>();  // released before the new storage is taken
    cap_ = 0;
    const std::size_t cap = n + n / 8;
    SparseTensor<T> fresh(dims);
    for (auto& col : fresh.idx) col.reserve(cap);
    fresh.vals.reserve(cap);
    out_ = std::move(fresh);
    cap_ = cap;
    for (const auto& col : out_.idx)
      lock(col.data(), cap * sizeof(index_t), out_pins_, pinned_out_);
    lock(out_.vals.data(), cap * sizeof(T), out_pins_, pinned_out_);
  }
  out_.dims = dims;
  for (auto& col : out_.idx) col.resize(n);  // within the capacity: the storage stays
  out_.vals.resize(n);
  return out_;
}

template <typename T>
void ContractBuffers<T>::discard() {
  for (auto& col : out_.idx) col.clear();
  out_.vals.clear();
}

template <typename T>
void ContractBuffers<T>::take(SparseTensor<T>&& t) {
  out_pins_.clear();
  pinned_out_ = 0;
  cap_ = 0;
  out_ = std::move(t);
}

template class ContractBuffers<float>;
template class ContractBuffers<double>;

template <typename T>
SparseTensor<T> gather(const SparseTensor<T>& local, const comm::Communicator& c, int root) {
  const int P = c.size();
  SparseTensor<T> out(local.dims);
  std::vector<std::int64_t> send(static_cast<std::size_t>(P), 0);
  send[static_cast<std::size_t>(root)] = local.nnz();
  const auto recv = comm::exchange_counts(c, send);
  const std::vector<std::int64_t> sd(static_cast<std::size_t>(P), 0),
      rd = comm::displacements(recv);
  const std::int64_t total = std::accumulate(recv.begin(), recv.end(), std::int64_t{0});
  for (int m = 0; m < local.order(); ++m) {
    out.idx[static_cast<std::size_t>(m)].resize(static_cast<std::size_t>(total));
    c.alltoallv_raw(local.idx[static_cast<std::size_t>(m)].data(), send.data(), sd.data(),
                    out.idx[static_cast<std::size_t>(m)].data(), recv.data(), rd.data(),
                    comm::DataType::u32);
  }
  out.vals.resize(static_cast<std::size_t>(total));
  c.alltoallv_raw(local.vals.data(), send.data(), sd.data(), out.vals.data(), recv.data(),
                  rd.data(), comm::data_type_of<T>());
  if (c.rank() == root) kernels::sort_sum_drop_zeros(out, 0);
  return out;
}

template <typename T>
void write_sorted(const std::string& path, const SparseTensor<T>& local,
                  const comm::Communicator& c, const std::string& source) {
  SparseTensor<double> copy = local.template cast<double>();
  auto d = partition::distribute(std::move(copy), partition::Scheme::nnz, {}, c);
  if (io::has_h5_extension(path)) {
    io::H5Header meta;
    meta.dims = local.dims;
    meta.has_duplicates = 0;
    meta.source = source;
    io::write_h5(path, d.block, c, meta);
  } else {
    io::write_tns(path, d.block, c);
  }
}

template SparseTensor<float> gather<float>(const SparseTensor<float>&, const comm::Communicator&,
                                           int);
template SparseTensor<double> gather<double>(const SparseTensor<double>&, const comm::Communicator&,
                                             int);
template void write_sorted<float>(const std::string&, const SparseTensor<float>&,
                                  const comm::Communicator&, const std::string&);
template void write_sorted<double>(const std::string&, const SparseTensor<double>&,
                                   const comm::Communicator&, const std::string&);

}  // namespace tessera::algo

#include "algo/disk_tier.hpp"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include "util/error.hpp"
#include "util/log.hpp"
#include "util/progress.hpp"
#include "util/timer.hpp"

namespace tessera::algo {
namespace {

/// Modes up to this length keep their distinct indices in a bitmap during the first pass
/// (32 MiB at most); longer modes merge sorted chunk sets.
constexpr std::uint64_t kBitmapMaxDim = std::uint64_t(1) << 28;

std::string human(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char s[32];
  std::snprintf(s, sizeof(s), "%.3g %s", b, unit[u]);
  return s;
}

}  // namespace

template <typename T>
DiskTensor<T>::DiskTensor(const DiskTensorOptions& o) : path_(o.path) {
  TESSERA_INPUT_CHECK(o.chunk_nnz >= 1,
                      "memory tier 3: the chunk size must be at least one "
                      "nonzero, got "
                          << o.chunk_nnz);
  // No HDF5 chunk cache: every pass reads each chunk once, and a cache would keep (order +
  // 1) x its size of host memory the budget does not count (and serve small stores from
  // memory instead of the disk).
  drop_behind_ = o.drop_behind;
  if (drop_behind_) io::evict_file(o.path);  // once: later reads drop behind themselves
  reader_ = std::make_unique<io::H5TensorReader>(o.path, o.verify_checksums, 0);
  reader_->set_drop_behind(drop_behind_);
  const io::H5TensorInfo& inf = reader_->info();
  dims_ = inf.dims;
  sorted_mode_ = inf.sorted_mode;
  if (o.block >= 0) {
    TESSERA_INPUT_CHECK(inf.partition.has_value() && o.block < inf.partition->nblocks(),
                        o.path << ": no block " << o.block << " in the stored partition");
    const auto r = inf.partition->block_range(o.block);
    first_ = r.first;
    count_ = r.second;
  } else {
    TESSERA_INPUT_CHECK(o.first >= 0 && o.count >= 0 && o.first + o.count <= inf.nnz,
                        o.path << ": nonzeros [" << o.first << ", " << o.first + o.count
                               << ") are outside the store's " << inf.nnz);
    first_ = o.first;
    count_ = o.count;
  }
  chunk_ = std::max<nnz_t>(1, std::min<nnz_t>(o.chunk_nnz, std::max<nnz_t>(count_, 1)));
  read_threads_ = o.read_threads;
  TESSERA_INPUT_CHECK(o.read_ahead >= 1 && o.read_ahead <= 64,
                      "memory tier 3: the read-ahead must be 1 to 64 chunks, got " << o.read_ahead);
  read_ahead_ = o.read_ahead;
  buffer_.resize(static_cast<std::size_t>(read_ahead_) + 1);
  if (!o.check_later_passes) {
    later_checks_.coordinates = false;
    later_checks_.values = false;
    later_checks_.blocks = false;
  }

  // First pass: every nonzero checked by the reader; distinct rows, ||X||^2, fingerprint.
  const int N = order();
  std::vector<std::vector<std::uint64_t>> bits(static_cast<std::size_t>(N));
  rows_.assign(static_cast<std::size_t>(N), {});
  for (int n = 0; n < N; ++n)
    if (dims_[static_cast<std::size_t>(n)] <= kBitmapMaxDim)
      bits[static_cast<std::size_t>(n)].assign((dims_[static_cast<std::size_t>(n)] + 63) / 64, 0);
  Progress progress(log::rank() == 0, "first pass over",
                    std::filesystem::path(o.path).filename().string(),
                    static_cast<std::uint64_t>(count_), "nonzeros");
  std::uint64_t seen = 0;
  stream([&](const SparseTensor<T>& c) {
    progress.update(seen += static_cast<std::uint64_t>(c.nnz()));
    for (int n = 0; n < N; ++n) {
      const auto& idx = c.idx[static_cast<std::size_t>(n)];
      auto& b = bits[static_cast<std::size_t>(n)];
      if (!b.empty()) {
        for (index_t i : idx) b[i >> 6] |= std::uint64_t(1) << (i & 63);
      } else {
        std::vector<index_t> u(idx.begin(), idx.end());
        std::sort(u.begin(), u.end());
        u.erase(std::unique(u.begin(), u.end()), u.end());
        auto& r = rows_[static_cast<std::size_t>(n)];
        std::vector<index_t> merged;
        merged.reserve(r.size() + u.size());
        std::set_union(r.begin(), r.end(), u.begin(), u.end(), std::back_inserter(merged));
        r.swap(merged);
      }
    }
    io::add_to_fingerprint(c, {}, &fingerprint_);  // also sums the squared values
    norm_ = std::hypot(norm_, c.norm());
  });
  norm2_ = fingerprint_.norm2;
  // Every chunk's checksum was verified in this pass; later passes keep the cheap checks
  // (coordinates inside dims, finite values, block ranges) but not the CRCs, which cost
  // about as much CPU time as a fast disk takes to deliver the bytes.
  if (o.verify_checksums && reader_->info().has_checksums) {
    reader_.reset();  // closed first: HDF5 shares an open dataset's state between openers
    reader_ = std::make_unique<io::H5TensorReader>(o.path, false, 0);
    reader_->set_drop_behind(drop_behind_);
  }
  fingerprint_.dims = dims_;
  for (int n = 0; n < N; ++n) {
    const auto& b = bits[static_cast<std::size_t>(n)];
    if (b.empty()) continue;
    auto& r = rows_[static_cast<std::size_t>(n)];
    for (std::size_t w = 0; w < b.size(); ++w)
      for (std::uint64_t x = b[w]; x != 0; x &= x - 1)
        r.push_back(static_cast<index_t>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(x))));
  }
  open_ = last_;
  first_pass_ = false;
}

template <typename T>
DiskTensor<T>::~DiskTensor() = default;

template <typename T>
const io::H5TensorInfo& DiskTensor<T>::info() const {
  return reader_->info();
}

template <typename T>
std::size_t DiskTensor<T>::bytes() const {
  return buffer_.size() * static_cast<std::size_t>(chunk_) *
         (static_cast<std::size_t>(order()) * sizeof(index_t) + sizeof(T));
}

template <typename T>
std::size_t DiskTensor<T>::mttkrp_stream_bytes(int) const {
  const std::size_t value_bytes = reader_->info().value_type == io::ValueType::float32 ? 4 : 8;
  return static_cast<std::size_t>(count_) *
         (static_cast<std::size_t>(order()) * sizeof(index_t) + value_bytes);
}

template <typename T>
std::vector<std::uint64_t> DiskTensor<T>::distinct_rows() const {
  std::vector<std::uint64_t> r;
  for (const auto& v : rows_) r.push_back(v.size());
  return r;
}

template <typename T>
double DiskTensor<T>::overlap_fraction() const {
  if (last_.read <= 0) return 1.0;
  return std::clamp(1.0 - last_.wait / last_.read, 0.0, 1.0);
}

template <typename T>
std::string DiskTensor<T>::describe() const {
  return "tier 3 (streamed from disk): " + std::to_string(count_) + " nonzeros [" +
         std::to_string(first_) + ", " + std::to_string(first_ + count_) + ") of " + path_ +
         " in " + std::to_string(chunks()) + " chunk(s) of " + std::to_string(chunk_) +
         " nonzeros read " + std::to_string(read_ahead_) + " ahead" +
         (drop_behind_ ? " (drop-behind)" : "") +
         (sorted_mode_ >= 0 ? ", sorted by mode " + std::to_string(sorted_mode_) : "") + ", " +
         human(static_cast<double>(bytes())) + " of host chunk buffers" +
         (pins_.empty() ? "" : " (page-locked)") + ", " +
         human(static_cast<double>(mttkrp_stream_bytes(0))) + " read per pass";
}

template <typename T>
void DiskTensor<T>::ensure_buffers() const {
  const auto cap = static_cast<std::size_t>(chunk_);
  for (auto& b : buffer_) {
    if (b.dims == dims_ && b.vals.capacity() >= cap) continue;
    b = SparseTensor<T>(dims_);
    for (auto& v : b.idx) v.reserve(cap);
    b.vals.reserve(cap);
  }
}

template <typename T>
void DiskTensor<T>::pin_buffers(kernels::Backend<T>& be) const {
  if (pinned_for_ == &be) return;
  ensure_buffers();
  pins_.clear();  // another backend's locks first (a range is locked once)
  pinned_for_ = &be;
  const auto cap = static_cast<std::size_t>(chunk_);
  for (auto& b : buffer_) {
    for (auto& v : b.idx)
      if (auto pin = be.pin_host(v.data(), cap * sizeof(index_t))) pins_.push_back(std::move(pin));
    if (auto pin = be.pin_host(b.vals.data(), cap * sizeof(T))) pins_.push_back(std::move(pin));
  }
}

template <typename T>
void DiskTensor<T>::set_backend_times(const kernels::AccumulateTimes& t) const {
  last_.backend_timed = true;
  last_.upload = t.copy;
  last_.device = t.compute;
}

template <typename T>
void DiskTensor<T>::read_chunk(nnz_t k, SparseTensor<T>* out) const {
  const nnz_t at = k * chunk_;
  const nnz_t n = std::min(chunk_, count_ - at);
  const int N = order();
  // Within the capacity reserved by ensure_buffers: no reallocation (the arrays may be
  // page-locked).
  index_t* p[kMaxOrder] = {};
  for (int m = 0; m < N; ++m) {
    out->idx[static_cast<std::size_t>(m)].resize(static_cast<std::size_t>(n));
    p[m] = out->idx[static_cast<std::size_t>(m)].data();
  }
  out->vals.resize(static_cast<std::size_t>(n));
  // pread straight into these buffers by several threads (HDF5's path for compressed stores),
  // this prefetch thread's share of the read threads.
  const int threads = std::max(
      1, (read_threads_ > 0 ? read_threads_
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) /
             read_ahead_);
  if (first_pass_)
    reader_->read_direct<T>(first_ + at, n, p, out->vals.data(), threads);
  else
    reader_->read_direct<T>(first_ + at, n, p, out->vals.data(), threads, later_checks_);
}

template <typename T>
void DiskTensor<T>::stream(const std::function<void(const SparseTensor<T>&)>& f) const {
  const nnz_t K = chunks();
  DiskPassTimes t;
  Timer wall;
  // Chunk k goes to buffer k % B (B = read_ahead + 1), read by prefetch thread k % P (P =
  // read_ahead); the compute thread takes the chunks in order. A buffer is refilled once
  // its chunk has computed, so up to P reads run while one chunk computes.
  ensure_buffers();
  const auto B = static_cast<nnz_t>(buffer_.size());
  const int P = read_ahead_;
  std::vector<char> full(static_cast<std::size_t>(B), 0);
  nnz_t consumed = 0;  // chunks the compute thread has finished with
  bool stop = false;
  // The first chunk whose read failed, and why: the pass fails there, as a single reader
  // would (chunks before it are still read and computed; a thread stops at its failure).
  nnz_t error_chunk = K;
  std::exception_ptr read_error;
  std::mutex mu;
  std::condition_variable cv;
  double read_s = 0;
  auto prefetch = [&](int p) {
    for (nnz_t k = p; k < K; k += P) {
      const auto s = static_cast<std::size_t>(k % B);
      {
        std::unique_lock<std::mutex> lk(mu);
        // Buffer s last held chunk k - B: free once it has computed.
        cv.wait(lk, [&] { return stop || (k < B || consumed > k - B); });
        if (stop) return;
      }
      Timer tr;
      try {
        read_chunk(k, &buffer_[s]);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (k < error_chunk) {
          error_chunk = k;
          read_error = std::current_exception();
        }
        cv.notify_all();
        return;
      }
      std::lock_guard<std::mutex> lk(mu);
      read_s += tr.seconds();
      full[s] = 1;
      cv.notify_all();
    }
  };
  std::vector<std::thread> readers;
  readers.reserve(static_cast<std::size_t>(P));
  for (int p = 0; p < P && p < K; ++p) readers.emplace_back(prefetch, p);
  auto finish = [&] {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cv.notify_all();
    for (auto& r : readers) r.join();
  };
  try {
    for (nnz_t k = 0; k < K; ++k) {
      const auto s = static_cast<std::size_t>(k % B);
      {
        Timer tw;
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return full[s] != 0 || error_chunk == k; });
        t.wait += tw.seconds();
        if (full[s] == 0) std::rethrow_exception(read_error);
      }
      Timer tc;
      f(buffer_[s]);
      t.compute += tc.seconds();
      {
        std::lock_guard<std::mutex> lk(mu);
        full[s] = 0;
        consumed = k + 1;
      }
      cv.notify_all();
    }
  } catch (...) {
    finish();
    throw;
  }
  finish();
  t.read = read_s;
  t.wall = wall.seconds();
  last_ = t;
  ++passes_;
}

template class DiskTensor<float>;
template class DiskTensor<double>;

}  // namespace tessera::algo

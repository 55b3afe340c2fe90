#include "plan/measure.hpp"

#include <sys/stat.h>

#include <algorithm>

#include "comm/mpi_communicator.hpp"
#include "io/h5store.hpp"
#include "kernels/factories.hpp"

namespace tessera::plan {

Limits measure_limits(const comm::MpiCommunicator& world, Backend backend,
                      const std::string& spill_dir, int ranks_on_node_override) {
  Limits l;
  const int on_node_here = ranks_on_node(world);  // collective: every rank calls it
  const int on_node = ranks_on_node_override > 0 ? ranks_on_node_override : on_node_here;
  const ProcessMemory pm = process_memory();
  const HostFacts f = read_host_facts();
  // Room for data: MemAvailable and the cgroup's room exclude what this process already
  // holds (its baseline); the fixed slack of the plan is kept free too.
  l.host = host_limit(f, on_node, 0);
  if (l.host.known()) {
    l.host.bytes = l.host.bytes > kHostSlackBytes ? l.host.bytes - kHostSlackBytes : 1;
    l.host.source += ", less " + human_bytes(double(kHostSlackBytes)) + " of slack";
  }
  l.notes = f.notes;
  l.baseline_host = pm.rss;
  l.disk = disk_free(spill_dir.empty() ? std::string(".") : spill_dir);
  if (backend == Backend::cuda) {
    const kernels::DeviceMemory m = kernels::cuda_memory_info(true);
    if (m.total == 0) {
      // No GPU here (a login node, a CPU-only build): unknown, so that --device-budget can
      // name the card to plan for (tessera plan --backend cuda --device-budget 80G).
      l.device = Limit{0, "no GPU is visible here (--device-budget names the card to plan for)"};
    } else {
      // A reserve for the CUDA libraries' workspaces (cuBLAS, cuSOLVER, NCCL buffers) that
      // the model does not list: 1/32 of the device, at least 512 MiB.
      const std::uint64_t reserve = std::max<std::uint64_t>(std::uint64_t(512) << 20, m.total / 32);
      l.device.bytes = m.free > reserve ? m.free - reserve : 1;
      l.device.source = "free GPU memory (cudaMemGetInfo: " + human_bytes(double(m.free)) + " of " +
                        human_bytes(double(m.total)) + ") less a reserve of " +
                        human_bytes(double(reserve)) + " for the CUDA libraries";
    }
  }
  // Agree: the smallest limits, the largest baseline (unknown limits count as unlimited).
  std::uint64_t v[4] = {l.host.known() ? l.host.bytes : ~std::uint64_t(0),
                        l.device.known() ? l.device.bytes : ~std::uint64_t(0),
                        l.disk.known() ? l.disk.bytes : ~std::uint64_t(0), 0};
  std::uint64_t mine[3] = {v[0], v[1], v[2]};
  world.allreduce(v, 3, comm::ReduceOp::min);
  std::uint64_t base = l.baseline_host;
  world.allreduce(&base, 1, comm::ReduceOp::max);
  l.baseline_host = base;
  auto settle = [&](Limit& lim, std::uint64_t agreed, std::uint64_t own) {
    if (agreed == ~std::uint64_t(0)) {
      lim.bytes = 0;  // unknown on every rank; the source says why where there is one
      return;
    }
    if (agreed != own || !lim.known())
      lim.source = "smallest over the ranks (" + human_bytes(double(agreed)) +
                   "; rank 0: " + (lim.known() ? lim.source : std::string("unknown")) + ")";
    lim.bytes = agreed;
  };
  settle(l.host, v[0], mine[0]);
  settle(l.device, v[1], mine[1]);
  settle(l.disk, v[2], mine[2]);
  if (!l.host.known()) {
    // Nothing measured (not Linux?): fall back to 3/4 of physical memory per rank.
    l.host.bytes = f.mem_total > 0 ? f.mem_total / 4 * 3 / static_cast<std::uint64_t>(on_node)
                                   : std::uint64_t(4) << 30;
    l.host.source = f.mem_total > 0 ? "3/4 of MemTotal (no other limit found)"
                                    : "4 GiB (nothing could be measured)";
  }
  return l;
}

TensorFacts facts_of_file(const std::string& path, const comm::MpiCommunicator& world) {
  TensorFacts t;
  t.path = path;
  t.store = io::is_tensor_store(path, world);
  if (t.store) {
    const io::H5TensorInfo h = io::read_h5_info(path, world);
    t.dims = h.dims;
    t.nnz = h.nnz;
    t.unique = h.has_duplicates == 0 ? 1 : h.has_duplicates == 1 ? 0 : -1;
    t.stored_value_bytes = h.value_type == io::ValueType::float32 ? 4 : 8;
    t.store_chunk_elems = h.chunk_elems;
    t.file_bytes = h.file_bytes;
    if (h.partition && h.partition->nblocks() == world.size()) {
      nnz_t mx = 0;
      for (int r = 0; r < world.size(); ++r) mx = std::max(mx, h.partition->block_range(r).second);
      t.max_block_nnz = mx;
    }
    return t;
  }
  t.text = true;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) t.file_bytes = static_cast<std::uint64_t>(st.st_size);
  return t;
}

std::string describe_limits(const Limits& l) {
  return "host " + (l.host.known() ? human_bytes(double(l.host.bytes)) : std::string("?")) +
         " per rank (" + l.host.source + ")" +
         (l.device.known()
              ? "; device " + human_bytes(double(l.device.bytes)) + " (" + l.device.source + ")"
              : std::string()) +
         "; disk " + (l.disk.known() ? human_bytes(double(l.disk.bytes)) : std::string("?")) +
         " (" + l.disk.source + ")";
}

}  // namespace tessera::plan

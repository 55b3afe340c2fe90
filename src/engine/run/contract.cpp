// run_contract (run/contract.hpp): a sparse tensor contraction, written once for the CLI
// and the Python module (kernels/sptc.hpp, algo/contract.hpp, docs/sptc.md).
#include "run/contract.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include "algo/contract.hpp"
#include "io/h5store.hpp"
#include "io/output.hpp"
#include "kernels/ops/sptc.hpp"
#include "kernels/sptc.hpp"
#include "partition/partition.hpp"
#include "plan/measure.hpp"
#include "run/validate.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/timer.hpp"

namespace tessera::run {
namespace {

/// ".h5"/".hdf5" (the tensor store), ".tns" or ".tns.gz"; the folder and the rest are
/// checked by io::OutputSet.
void check_output_path(const std::string& out) {
  const bool ok = io::has_h5_extension(out) || out.ends_with(".tns") || out.ends_with(".tns.gz");
  TESSERA_INPUT_CHECK(ok, "--out '" << out
                                    << "': expected a name ending in .tns, .tns.gz (FROSTT text) "
                                       "or .h5 (HDF5 tensor store)");
}

/// Writes an output made in pieces (algo::ContractPieceSink) so that memory holds one
/// piece: every piece is redistributed into contiguous ranges of the global order
/// (partition::distribute, as algo::write_sorted) and
///  - text (.tns, .tns.gz): written as its own file next to the output, the files joined
///    in piece order by rank 0 at the end (each keeps its '#' line, which readers skip;
///    gzip members concatenate into one valid stream);
///  - .h5: spilled raw to a file per rank next to the output, then written into one store
///    (io::H5TensorWriter) once the total is known, piece by piece.
/// The pieces are ascending ranges of output mode 0, so the file is in global order.
template <typename T>
class PieceFileSink final : public algo::ContractPieceSink<T> {
 public:
  PieceFileSink(std::string path, std::string source, std::vector<std::uint64_t> dims,
                const comm::MpiCommunicator& world)
      : path_(std::move(path)), source_(std::move(source)), dims_(std::move(dims)), w_(world) {
    h5_ = io::has_h5_extension(path_);
  }
  ~PieceFileSink() override {
    for (const auto& f : parts_) std::remove(f.c_str());
    if (!spill_.empty()) std::remove(spill_.c_str());
  }
  std::size_t bytes_per_entry() const override {
    // The double copy, distribute's sort and exchange (about three copies of a double entry).
    return 3 * (dims_.size() * sizeof(index_t) + sizeof(double));
  }
  void put(SparseTensor<T>&& share, int piece) override {
    if (!h5_) {
      // A temporary of the output (io/output.hpp; rank 0's name, so every rank agrees; a
      // special output's parts go to the current folder). The part's name tells write_tns
      // whether to compress.
      std::string base = path_;
      if (io::is_special_file(path_)) base = std::filesystem::path(path_).filename().string();
      std::string part = io::temp_path(
          base, "piece" + std::to_string(piece) + (path_.ends_with(".gz") ? ".tns.gz" : ".tns"));
      std::int64_t len = static_cast<std::int64_t>(part.size());
      w_.broadcast(&len, 1, 0);
      part.resize(static_cast<std::size_t>(len));
      w_.broadcast(part.data(), part.size(), 0);
      algo::write_sorted(part, share, w_, source_);
      parts_.push_back(part);
      return;
    }
    SparseTensor<double> copy = share.template cast<double>();
    share = SparseTensor<T>();
    auto d = partition::distribute(std::move(copy), partition::Scheme::nnz, {}, w_);
    const SparseTensor<double>& b = d.block;
    const std::int64_t n = static_cast<std::int64_t>(b.nnz());
    std::int64_t before = 0;  // this rank's offset within the piece
    {
      std::vector<std::int64_t> all(static_cast<std::size_t>(w_.size()), 0);
      all[static_cast<std::size_t>(w_.rank())] = n;
      w_.allreduce(all.data(), w_.size());
      for (int r = 0; r < w_.rank(); ++r) before += all[static_cast<std::size_t>(r)];
      Run run{written_ + before, n};
      for (auto v : all) written_ += v;
      runs_.push_back(run);
    }
    comm::run_collectively(w_, [&] {
      if (spill_.empty()) {
        spill_ = io::temp_path(path_, "spill-r" + std::to_string(w_.rank()));
        out_.open(spill_, std::ios::binary | std::ios::trunc);
      }
      for (const auto& col : b.idx)
        out_.write(reinterpret_cast<const char*>(col.data()),
                   static_cast<std::streamsize>(col.size() * sizeof(index_t)));
      out_.write(reinterpret_cast<const char*>(b.vals.data()),
                 static_cast<std::streamsize>(b.vals.size() * sizeof(double)));
      out_.flush();
      TESSERA_INPUT_CHECK(out_.good(), "--out '" << path_ << "': cannot write the spill file '"
                                                 << spill_ << "' (disk full?)");
    });
  }
  /// Collective: the output file from the pieces.
  void finish() {
    if (!h5_) {
      comm::run_collectively(w_, [&] {
        if (w_.rank() != 0) return;
        io::AtomicOutput out(path_);  // a temporary renamed by commit(), removed on error
        const std::string& tmp = out.write_path();
        {
          std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
          for (const auto& f : parts_) {
            std::ifstream i(f, std::ios::binary);
            o << i.rdbuf();
          }
          o.close();
          TESSERA_INPUT_CHECK(!o.fail(), "--out '" << path_ << "': cannot write '" << tmp << "'");
        }
        out.commit();
      });
      w_.barrier();
      return;
    }
    out_.close();
    io::H5Header h;
    h.dims = dims_;
    h.nnz = written_;
    h.has_duplicates = 0;
    h.source = source_;
    io::H5TensorWriter wr(path_, h, w_);
    std::ifstream in;
    comm::run_collectively(w_, [&] {
      if (!spill_.empty()) in.open(spill_, std::ios::binary);
    });
    const int N = static_cast<int>(dims_.size());
    for (const Run& r : runs_) {
      std::vector<std::vector<index_t>> idx(static_cast<std::size_t>(N));
      std::vector<double> vals(static_cast<std::size_t>(r.count));
      comm::run_collectively(w_, [&] {
        for (auto& col : idx) {
          col.resize(static_cast<std::size_t>(r.count));
          in.read(reinterpret_cast<char*>(col.data()),
                  static_cast<std::streamsize>(col.size() * sizeof(index_t)));
        }
        in.read(reinterpret_cast<char*>(vals.data()),
                static_cast<std::streamsize>(vals.size() * sizeof(double)));
        TESSERA_INPUT_CHECK(r.count == 0 || in.good(),
                            "--out '" << path_ << "': cannot read back '" << spill_ << "'");
      });
      io::H5Piece pc;
      pc.first = r.first;
      pc.count = r.count;
      for (int m = 0; m < N; ++m) pc.idx[m] = idx[static_cast<std::size_t>(m)].data();
      pc.vals = vals.data();
      wr.write(std::vector<io::H5Piece>{pc});
    }
    wr.commit();
  }

 private:
  struct Run {
    std::int64_t first = 0, count = 0;
  };
  std::string path_, source_;
  std::vector<std::uint64_t> dims_;
  const comm::MpiCommunicator& w_;
  bool h5_ = false;
  std::vector<std::string> parts_;
  std::string spill_;
  std::ofstream out_;
  std::vector<Run> runs_;
  std::int64_t written_ = 0;
};

/// The record's context: the front end's, with the tuning of the run's backend.
template <typename T>
RecordContext context(const ContractRunOptions& a, const Compute<T>& cx) {
  RecordContext ctx = a.record;
  ctx.tuning = cx.backend->tuning();
  return ctx;
}

/// All of Z on every rank: gathered on rank 0 (sorted, summed), then broadcast.
template <typename T>
SparseTensor<T> gather_everywhere(const SparseTensor<T>& local,
                                  const std::vector<std::uint64_t>& dims,
                                  const comm::MpiCommunicator& world) {
  SparseTensor<T> z = algo::gather(local, world, 0);
  std::int64_t n = z.nnz();
  world.broadcast(&n, 1, 0);
  if (world.rank() != 0) {
    z = SparseTensor<T>(dims);
    for (auto& c : z.idx) c.resize(static_cast<std::size_t>(n));
    z.vals.resize(static_cast<std::size_t>(n));
  }
  for (auto& c : z.idx) world.broadcast(c.data(), c.size(), 0);
  world.broadcast(z.vals.data(), z.vals.size(), 0);
  z.dims = dims;
  return z;
}

}  // namespace

template <typename T>
ContractRun<T> run_contract(const ContractRunOptions& a, const comm::MpiCommunicator& world,
                            ContractArrays<T>* arrays) {
  Timer total;
  ContractRun<T> out;
  const std::string xname = a.x.empty() ? a.x_name : a.x;
  const std::string yname = a.y.empty() ? a.y_name : a.y;
  kernels::ContractSpec spec;
  algo::ContractOptions o;
  // Every option first (run/validate.hpp), then what needs no data, on every rank alike: the
  // spec, the files, the output name.
  validate(a, world);
  comm::run_collectively(world, [&] {
    spec = kernels::parse_contract_spec(a.einsum);
    if (!a.x.empty() || arrays == nullptr) contract_check_input_file(a.x, "X");
    if (!a.y.empty() || arrays == nullptr) contract_check_input_file(a.y, "Y");
    if (!a.out.empty()) check_output_path(a.out);
    if (!a.mem_limit.empty()) o.memory_limit = parse_bytes(a.mem_limit, "--mem-limit");
    io::parse_index_base(a.load.index_base);
    o.hierarchy = comm::parse_hierarchy(a.run.hierarchy);
  });
  // The node of every rank (collective): the partial output's relays (--comm-hierarchy).
  if (world.size() > 1) o.nodes = comm::node_map(world, a.run.emulate_nodes);
  {
    // Every output checked before any work (io/output.hpp).
    io::OutputSet outputs;
    outputs.add_input("input X", a.x);
    outputs.add_input("input Y", a.y);
    outputs.add_output("--out", a.out,
                       io::has_h5_extension(a.out) ? io::OutputKind::store : io::OutputKind::text);
    outputs.add_output("--json", a.run.json, io::OutputKind::record);
    outputs.validate(a.run.force, world);
  }
  {
    // The planner's measured limits (host: MemAvailable, cgroup, Slurm, shared by the
    // node's ranks; device: the GPU's free memory less a reserve), agreed over the ranks.
    const auto kind0 = kernels::parse_backend(a.run.backend);
    const bool cuda = kind0 == kernels::BackendKind::cuda;
    const plan::Limits lim =
        plan::measure_limits(world, cuda ? plan::Backend::cuda : plan::Backend::cpu, "");
    if (a.mem_limit.empty()) {
      o.memory_limit = static_cast<std::size_t>(lim.host.bytes);
      o.memory_limit_source = lim.host.source;
    } else {
      o.memory_limit_source = "--mem-limit " + a.mem_limit;
    }
    if (cuda && lim.device.known()) {
      o.device_limit = static_cast<std::size_t>(lim.device.bytes);
      o.device_limit_source = lim.device.source;
    }
  }
  o.dry_run = a.run.dry_run;
  o.print = a.print;
  if (a.run.strategy != "auto" && a.run.strategy != "allreduce")
    log::warn("--comm-strategy does not apply to contract: nonzeros are routed by hashes");
  if (a.run.overlap != "auto") log::warn("--comm-overlap does not apply to contract (CP-ALS only)");

  auto cx = make_compute<T>(a.run, world);
  o.data = cx.data;  // nonzeros routed over NCCL on GPUs, MPI otherwise
  const auto kind = cx.kind;
  comm::run_collectively(world, [&] { contract_probe_backend(*cx.backend, spec); });
  log::info("tessera contract " + spec.text + ": " + std::to_string(world.size()) +
            " rank(s), backend " + kernels::to_string(kind) + ", " +
            std::to_string(effective_threads(a.run.threads)) + " thread(s) per rank, " +
            a.run.precision + ", " + std::to_string(spec.contracted()) + " contracted and " +
            std::to_string(spec.batch()) + " batch mode(s)");

  auto in = contract_read_inputs<T>(a.x, a.y, a.load.index_base, world, arrays);
  std::vector<std::uint64_t> out_dims;
  comm::run_collectively(world, [&] { out_dims = contract_fit_dims(spec, a.extend_dims, in); });
  const SparseTensor<T>& X = in.x;
  const SparseTensor<T>& Y = in.same ? in.x : in.y;

  const std::string source = "tessera contract " + xname + " " + yname + " --einsum " + spec.text;
  std::unique_ptr<PieceFileSink<T>> sink;
  if (!a.out.empty())  // a dry run plans with it (nothing is put)
    sink = std::make_unique<PieceFileSink<T>>(a.out, source, out_dims, world);
  algo::ContractResult<T> res;
  try {
    res = algo::contract<T>(X, Y, spec, *cx.backend, world, o, nullptr, sink.get());
  } catch (const InputError& e) {
    // algo::contract decides its InputErrors from data every rank shares: agreed already.
    throw CollectiveError(e.what());
  }
  if (res.dry_run) {
    if (world.rank() == 0)
      std::printf(
          "contract plan (%s; the counts need the inputs read, routed and matched, "
          "which this dry run did):\n  %s\n  host data peak per rank %s, output pieces "
          "%d\n",
          spec.text.c_str(), res.piece_plan.reason.c_str(),
          human_bytes(static_cast<double>(res.piece_plan.host_bytes)).c_str(),
          res.piece_plan.pieces);
    if (!a.run.json.empty() || a.make_record) {
      // Envelope timing: the default (unit "run", seconds since the start).
      nlohmann::json j = record_envelope("contract", {{"x", xname}, {"y", yname}}, world,
                                         kernels::to_string(kind), a.run.threads, context(a, cx));
      j["dry_run"] = true;
      j["memory_plan"] = res.piece_plan.to_json();
      j["products"] = res.global_products;
      j["partial_output_entries"] = res.global_partial_entries;
      write_json(a.run.json, j, world);
      out.record = j;
    }
    out.dry_run = true;
    return out;
  }
  out.dims = res.dims;
  const double compute_s = res.phases.get("route_inputs") + res.phases.get("plan") +
                           res.phases.get("multiply") + res.phases.get("route_output") +
                           res.phases.get("merge");
  double times[6] = {res.stats.match_seconds,
                     res.stats.count_seconds,
                     res.stats.multiply_seconds,
                     res.stats.assemble_seconds,
                     compute_s,
                     res.phases.get("route_inputs") + res.phases.get("route_output")};
  world.allreduce(times, 6, comm::ReduceOp::max);
  char line[512];
  std::snprintf(line, sizeof(line),
                "done: Z %s, %lld nonzeros from %lld products (%lld zeros dropped) in %.3f s; "
                "kernel (slowest rank): match %.3f s, count %.3f s, multiply %.3f s, assemble "
                "%.3f s; routing %.3f s; %.3g products/s",
                format_dims(res.dims).c_str(), static_cast<long long>(res.global_nnz),
                static_cast<long long>(res.global_products),
                static_cast<long long>(res.global_zeros_dropped), times[4], times[0], times[1],
                times[2], times[3], times[5],
                times[4] > 0 ? static_cast<double>(res.global_products) / times[4] : 0.0);
  log::info(line);

  double write_s = 0;
  // An empty Z is refused for every output format alike: a Tessera tensor file holds at least
  // one nonzero (the readers refuse a file without one), so a header-only .tns would be a
  // file nothing reads back. Nothing is written (a piece sink's parts are removed).
  if (!a.out.empty() && res.global_nnz == 0)
    throw CollectiveError("Z has no nonzeros (" + std::to_string(res.global_products) +
                          " products, " + std::to_string(res.global_zeros_dropped) +
                          " sums of 0 dropped): nothing written to " + a.out +
                          " (a tensor file holds at least one nonzero)");
  if (!a.out.empty()) {
    Timer tw;
    if (res.streamed) {
      sink->finish();
    } else {
      algo::write_sorted(a.out, res.local, world, source);
    }
    write_s = tw.seconds();
    log::info("Z written to " + a.out + " (" + std::to_string(write_s) + " s)");
  }
  if (a.gather) out.z = gather_everywhere(res.local, res.dims, world);
  if (!a.run.json.empty() || a.make_record) {
    double peak = static_cast<double>(peak_rss_bytes());
    world.allreduce(&peak, 1, comm::ReduceOp::max);
    nlohmann::json j =
        record_envelope("contract",
                        {{"x", xname},
                         {"y", yname},
                         {"einsum", spec.text},
                         {"out", a.out},
                         {"backend", kernels::to_string(kind)},
                         {"precision", a.run.precision},
                         {"index_base", a.load.index_base},
                         {"extend_dims", a.extend_dims},
                         {"memory_limit_bytes", o.memory_limit},
                         {"comm_hierarchy", a.run.hierarchy},
                         {"emulate_nodes", a.run.emulate_nodes},
                         {"nodes", o.nodes.nodes()}},
                        world, kernels::to_string(kind), a.run.threads, context(a, cx));
    j["inputs"] = {{"x", {{"dims", X.dims}, {"nnz", in.nnz[0]}}},
                   {"y", {{"dims", Y.dims}, {"nnz", in.nnz[1]}}},
                   {"self_contraction", in.same},
                   {"routed_once", res.routed_once},
                   {"bytes_read", in.bytes}};
    j["output"] = {{"dims", res.dims}, {"nnz", res.global_nnz}};
    j["products"] = res.global_products;
    j["busiest_rank_products"] = res.max_rank_products;
    j["partial_output_entries"] = res.global_partial_entries;
    j["zeros_dropped"] = res.global_zeros_dropped;
    j["kernel_seconds_max_over_ranks"] = {
        {"match", times[0]}, {"count", times[1]}, {"multiply", times[2]}, {"assemble", times[3]}};
    nlohmann::json ph;
    for (const char* p : {"route_inputs", "plan", "multiply", "route_output", "merge"}) {
      double v = res.phases.get(p);
      world.allreduce(&v, 1, comm::ReduceOp::max);
      ph[p] = v;
    }
    ph["read"] = in.read_seconds;
    ph["write"] = write_s;
    ph["io"] = in.read_seconds + write_s;
    ph["partition"] = ph["route_inputs"];  // the inputs' nonzeros routed to their ranks
    ph["setup"] = ph["plan"];
    // The contraction after routing and planning (one "iteration").
    ph["iterations"] =
        ph["multiply"].get<double>() + ph["route_output"].get<double>() + ph["merge"].get<double>();
    ph["total"] = total.seconds();
    j["phases_seconds"] = ph;
    // One contraction, slowest rank: routing, planning, multiplication and merge; the
    // kernel is the multiplication, comm the routing of inputs and output.
    j["timing"] = timing_record("contraction", times[4],
                                {{"kernel", ph["multiply"].get<double>()}, {"comm", times[5]}});
    j["pieces"] = res.pieces;
    if (!res.output_merge.empty()) j["output_merge"] = res.output_merge;
    if (res.routed_on_device) j["replicated_by_nodes"] = res.replicated_by_nodes;
    if (res.network_entries >= 0) j["output_network_entries"] = res.network_entries;
    j["memory_plan"] = res.piece_plan.to_json();
    j["memory_estimate_bytes_per_rank"] = {
        {"total", res.memory.total_bytes},         {"mean_total", res.memory.mean_total_bytes},
        {"inputs", res.memory.input_bytes},        {"routed", res.memory.routed_bytes},
        {"workspace", res.memory.workspace_bytes}, {"output", res.memory.output_bytes},
        {"exchange", res.memory.exchange_bytes}};
    j["throughput"] = {
        {"products_per_s", compute_s > 0 ? res.global_products / times[4] : 0.0},
        {"read_bytes_per_s", in.read_seconds > 0 ? in.bytes / in.read_seconds : 0.0}};
    j["peak_memory_bytes_per_rank"] = peak;
    write_json(a.run.json, j, world);
    out.record = j;
  }
  return out;
}

template ContractRun<float> run_contract<float>(const ContractRunOptions&,
                                                const comm::MpiCommunicator&,
                                                ContractArrays<float>*);
template ContractRun<double> run_contract<double>(const ContractRunOptions&,
                                                  const comm::MpiCommunicator&,
                                                  ContractArrays<double>*);

}  // namespace tessera::run

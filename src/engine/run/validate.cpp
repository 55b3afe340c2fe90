// The validation layer of the run options (run/validate.hpp).
#include "run/validate.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <sstream>

#include "algo/cp_als.hpp"
#include "algo/tucker.hpp"
#include "io/h5store.hpp"
#include "io/model_io.hpp"
#include "io/posix_io.hpp"
#include "kernels/sptc.hpp"
#include "kernels/tuning.hpp"
#include "tensor/sparse_tensor.hpp"
#include "util/error.hpp"

namespace tessera::run {
namespace {

/// "--flag value: expected a, b or c" unless `v` is one of `ok`.
void one_of(const std::string& v, std::initializer_list<const char*> ok, const char* flag) {
  if (std::any_of(ok.begin(), ok.end(), [&](const char* s) { return v == s; })) return;
  std::ostringstream words;
  std::size_t k = 0;
  for (const char* s : ok) words << (k++ == 0 ? "" : k == ok.size() ? " or " : ", ") << s;
  TESSERA_INPUT_CHECK(false, flag << " " << v << ": expected " << words.str());
}

/// The comma-separated tokens of `s` ("" is one empty token).
std::vector<std::string> tokens(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t p = 0, q; p <= s.size(); p = q + 1) {
    q = std::min(s.find(',', p), s.size());
    out.push_back(s.substr(p, q - p));
  }
  return out;
}

/// --nonneg: all | none | "" (a bare --nonneg: all) | mode numbers; the modes against the
/// order come with the order (algo::parse_mode_set).
void check_mode_set_syntax(const std::string& s, const char* flag) {
  if (s.empty() || s == "all" || s == "none") return;
  for (const std::string& t : tokens(s)) {
    const bool digits = !t.empty() && t.size() <= 9 && std::all_of(t.begin(), t.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    TESSERA_INPUT_CHECK(digits && std::stoi(t) < kMaxOrder,
                        flag << " " << s << ": '" << t
                             << "' is not a mode (expected all, none or mode numbers 0, 1, ... "
                                "separated by commas)");
  }
}

/// --l1, --l2: one number >= 0 or one per mode (algo::parse_mode_values' own message).
void check_mode_values_syntax(const std::string& s, const char* flag) {
  algo::parse_mode_values(s, static_cast<int>(tokens(s).size()), flag);
}

/// A file an option names (`what`: "--init file:m.h5"): it exists, is a regular file and can
/// be read. stat() only: nothing is opened, so a FIFO cannot block.
void check_option_file(const std::string& path, const std::string& what, const char* expected) {
  struct stat st {};
  TESSERA_INPUT_CHECK(::stat(path.c_str(), &st) == 0, what << ": does not exist");
  TESSERA_INPUT_CHECK(S_ISREG(st.st_mode), what << ": is " << io::posix::file_kind(st.st_mode)
                                                << ", expected " << expected);
  TESSERA_INPUT_CHECK(::access(path.c_str(), R_OK) == 0,
                      what << ": cannot be read (permission denied)");
}

void check_checkpoint_args(const CheckpointArgs& c) {
  TESSERA_INPUT_CHECK(c.every >= 0, "--checkpoint-every " << c.every << ": expected >= 0");
}

/// The dims and order of a store input from its header (collective; empty for text inputs,
/// arrays and inputs that are not there: those are reported by the read).
std::vector<std::uint64_t> store_dims(const std::string& path, const comm::MpiCommunicator& world) {
  if (path.empty() || !io::has_h5_extension(path)) return {};
  struct stat st {};
  int regular = ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? 1 : 0;
  if (world.allreduce_value(regular, comm::ReduceOp::min) == 0) return {};
  return io::read_h5_info(path, world).dims;
}

/// --grid against the ranks running (before the input is read: the product does not depend
/// on the order) and, with `order` > 0, against the order.
void check_grid(const std::string& grid, int order, int nranks) {
  if (grid.empty()) return;
  const std::vector<std::uint64_t> g = parse_dims(grid, "--grid");
  TESSERA_INPUT_CHECK(order <= 0 || static_cast<int>(g.size()) == order,
                      "--grid " << grid << ": " << g.size() << " entries for an order-" << order
                                << " tensor (give one per mode)");
  long double prod = 1;
  for (std::uint64_t p : g) prod *= static_cast<long double>(p);
  TESSERA_INPUT_CHECK(prod == nranks, "--grid " << grid << ": multiplies to " << prod << " but "
                                                << nranks << " rank(s) are running");
}

}  // namespace

std::vector<int> parse_rank_list(const std::string& s) {
  std::size_t n = 1;
  for (char c : s) n += (c == ',' || c == 'x' || c == 'X') ? 1 : 0;
  // parse_ranks' own messages for the tokens; the order is the count given.
  return algo::parse_ranks(s, static_cast<int>(std::min<std::size_t>(n, 1u << 20)));
}

void check_compute_options(const ComputeOptions& run, const LoadOptions& load) {
  one_of(run.backend, {"auto", "reference", "cpu", "cuda"}, "--backend");
  one_of(run.precision, {"double", "float"}, "--precision");
  one_of(run.strategy, {"auto", "allreduce", "layer", "owners"}, "--comm-strategy");
  one_of(run.overlap, {"auto", "on", "off"}, "--comm-overlap");
  one_of(run.hierarchy, {"auto", "flat", "node"}, "--comm-hierarchy");
  TESSERA_INPUT_CHECK(run.emulate_nodes >= 0 && run.emulate_nodes <= (1 << 20),
                      "--emulate-nodes " << run.emulate_nodes
                                         << ": expected a node count >= 0 (0: the real nodes)");
  TESSERA_INPUT_CHECK(run.threads >= 0, "--threads " << run.threads << ": expected >= 0");
  if (!run.device_budget.empty()) parse_bytes(run.device_budget, "--device-budget");
  if (!run.host_budget.empty()) parse_bytes(run.host_budget, "--host-budget");
  one_of(run.tier, {"auto", "1", "2", "3"}, "--tier");
  TESSERA_INPUT_CHECK(run.read_ahead >= 1 && run.read_ahead <= 64,
                      "--read-ahead " << run.read_ahead << ": expected 1 to 64");
  one_of(run.read_cache, {"auto", "keep", "drop"}, "--read-cache");
  TESSERA_INPUT_CHECK(
      std::isfinite(run.nccl_timeout_s) && run.nccl_timeout_s >= 0,
      "--nccl-timeout " << run.nccl_timeout_s << ": expected seconds >= 0 (0: no limit)");
  kernels::check(run.tuning);
  one_of(load.index_base, {"1", "0", "auto"}, "--index-base");
  one_of(load.partition, {"auto", "nnz", "grid"}, "--partition");
  if (!load.grid.empty()) parse_dims(load.grid, "--grid");
}

void check_cp_constraint_args(const CpConstraintArgs& c) {
  check_mode_set_syntax(c.nonneg, "--nonneg");
  check_mode_values_syntax(c.l1, "--l1");
  if (!c.l2.empty()) check_mode_values_syntax(c.l2, "--l2");
  one_of(c.cuda_graph, {"on", "off"}, "--cuda-graph");
}

/// A per-mode value list (syntax checked) whose every value is 0: "0", "0.0", "0,0,0".
bool all_zero(const std::string& s, const char* flag) {
  const auto v = algo::parse_mode_values(s, static_cast<int>(tokens(s).size()), flag);
  return std::all_of(v.begin(), v.end(), [](double x) { return x == 0; });
}

/// What CP-APR (--loss poisson, algo/cp_apr.hpp) and GCP (--solver gcp, algo/cp_gcp.hpp) do
/// not combine with.
void check_not_als_options(const CpRunOptions& o, algo::Solver solver) {
  const bool apr = solver == algo::Solver::apr;
  const std::string head = "--loss " + o.con.loss + (apr ? "" : " (GCP)") + " with ";
  const char* what = apr ? "Poisson CP" : "GCP";
  const auto no = [&](bool ok, const std::string& opt, const std::string& why) {
    TESSERA_INPUT_CHECK(ok, head << opt << ": " << why);
  };
  no(!o.als.observed_only, "--observed-only",
     std::string(what) +
         " fits every entry, the zeros included (use --loss gaussian for completion)");
  no(all_zero(o.con.l1, "--l1") && (o.con.l2.empty() || all_zero(o.con.l2, "--l2")), "--l1/--l2",
     std::string("penalties are not implemented for ") + what);
  no(o.init != "nvecs", "--init nvecs",
     apr ? "singular vectors have negative entries; use --init random or file:MODEL.h5"
         : "use --init random or file:MODEL.h5");
  no(o.ckpt.every == 0 && o.ckpt.resume.empty(), "--checkpoint-every/--resume",
     std::string("checkpoints of ") + what +
         " are not implemented; use --out and --init file:MODEL.h5 to continue from a model");
  no(o.run.strategy != "layer", "--comm-strategy layer",
     std::string(what) + " runs with the allreduce strategy (every rank holds every factor row)");
  no(o.run.tier == "auto" || o.run.tier == "1", "--tier " + o.run.tier,
     std::string(what) + " needs the tensor in memory (tier 1)");
  const bool kept_nonneg = o.con.loss == "gamma" || o.con.loss == "rayleigh";
  if (!apr &&
      !kept_nonneg)  // CP-APR's factors are >= 0 by construction, gamma's and rayleigh's kept so
    no(o.con.nonneg == "none", "--nonneg",
       "GCP keeps the factors >= 0 only for gamma and rayleigh (it always does there)");
  if (!apr)  // samples are numbered in global coordinate order: the nnz partition's blocks
    no(o.load.partition != "grid", "--partition grid",
       "GCP draws its samples from the nnz partition's blocks (leave --partition out)");
}

void check_cp_options(const CpRunOptions& o) {
  check_cp_values(o.als, o.record.interface == "python");
  TESSERA_INPUT_CHECK(o.run.strategy != "owners",
                      "--comm-strategy owners applies to tucker only (TTMc rows summed on their "
                      "owner ranks): CP-ALS takes auto, allreduce or layer");
  if (o.init.rfind("file:", 0) == 0) {
    TESSERA_INPUT_CHECK(o.init.size() > 5, "--init file: names no model file");
  } else {
    TESSERA_INPUT_CHECK(
        o.init == "random" || o.init == "nvecs" || (o.init == "factors" && o.init_factors),
        "--init " << o.init << ": expected random, nvecs or file:MODEL.h5");
  }
  TESSERA_INPUT_CHECK(o.init == "random" || o.ckpt.resume.empty(),
                      "--init " << o.init << " and --resume " << o.ckpt.resume
                                << ": a run starts from one of them, not both");
  check_cp_constraint_args(o.con);
  check_checkpoint_args(o.ckpt);
  check_compute_options(o.run, o.load);
  const algo::Solver solver = solver_of(o.con);
  if (solver != algo::Solver::als) check_not_als_options(o, solver);
  TESSERA_INPUT_CHECK(!(o.run.strategy == "layer" && o.load.partition == "nnz"),
                      "--comm-strategy layer with --partition nnz: the layer strategy needs the "
                      "grid partition (use --partition grid, or leave --partition out)");
}

void check_tucker_options(const TuckerRunOptions& o) {
  parse_rank_list(o.ranks);
  algo::parse_svd_method(o.svd);
  algo::parse_tucker_init(o.init);
  TESSERA_INPUT_CHECK(o.iters >= 1 && o.iters <= 1000000,
                      "--iters " << o.iters << ": expected 1 to 1000000");
  TESSERA_INPUT_CHECK(std::isfinite(o.tol) && o.tol >= 0, "--tol " << o.tol << ": expected >= 0");
  TESSERA_INPUT_CHECK(o.subspace_steps >= 1 && o.subspace_steps <= 1000,
                      "--subspace-steps " << o.subspace_steps << ": expected 1 to 1000");
  TESSERA_INPUT_CHECK(o.svd != "scalapack" || algo::scalapack_available(),
                      "--svd scalapack: this tessera was built without ScaLAPACK (reconfigure "
                      "with -DTESSERA_WITH_SCALAPACK=ON where libscalapack is installed), or "
                      "use --svd gram or --svd subspace");
  if (!o.max_mem.empty()) parse_bytes(o.max_mem, "--max-mem");
  const algo::TuckerRows rows = algo::parse_tucker_rows(o.run.strategy);
  TESSERA_INPUT_CHECK(rows != algo::TuckerRows::allreduce || o.svd == "gram",
                      "--comm-strategy allreduce with --svd " << o.svd
                                                              << ": the TTMc rows are all-reduced "
                                                                 "for --svd gram only (use "
                                                                 "owners or auto)");
  check_checkpoint_args(o.ckpt);
  check_compute_options(o.run, o.load);
}

void check_contract_options(const ContractRunOptions& o) {
  kernels::parse_contract_spec(o.einsum);
  const bool out_ok = o.out.empty() || io::has_h5_extension(o.out) || o.out.ends_with(".tns") ||
                      o.out.ends_with(".tns.gz");
  TESSERA_INPUT_CHECK(out_ok, "--out '" << o.out
                                        << "': expected a name ending in .tns, .tns.gz (FROSTT "
                                           "text) or .h5 (HDF5 tensor store)");
  if (!o.mem_limit.empty()) parse_bytes(o.mem_limit, "--mem-limit");
  check_compute_options(o.run, o.load);
}

void validate(const CpRunOptions& o, const comm::MpiCommunicator& world) {
  comm::run_collectively(world, [&] {
    check_cp_options(o);  // 1: values
    check_grid(o.load.grid, 0, world.size());
    if (!o.ckpt.resume.empty())
      check_option_file(o.ckpt.resume, "--resume " + o.ckpt.resume, "a checkpoint (HDF5)");
    if (o.init.rfind("file:", 0) != 0) return;
    const std::string path = o.init.substr(5);  // 2: the --init model, from its header
    check_option_file(path, "--init " + o.init, "an HDF5 model file");
    const io::ModelFileKind k = io::probe_model_file(path);
    TESSERA_INPUT_CHECK(k.format == "tessera-kruskal",
                        "--init " << o.init
                                  << ": not a Tessera CP model (expected a model written by "
                                     "tessera cp --out or tessera.save_model)");
    TESSERA_INPUT_CHECK(k.rank == o.als.rank, "--init " << o.init << ": the model has rank "
                                                        << k.rank << ", the run asks for --rank "
                                                        << o.als.rank);
  });
  const std::vector<std::uint64_t> dims = store_dims(o.load.path, world);
  if (dims.empty()) return;
  comm::run_collectively(world, [&] {  // 3: against the store's header
    const int order = static_cast<int>(dims.size());
    algo::parse_mode_set(o.con.nonneg.empty() ? "all" : o.con.nonneg, order, "--nonneg");
    algo::parse_mode_values(o.con.l1, order, "--l1");
    if (!o.con.l2.empty()) algo::parse_mode_values(o.con.l2, order, "--l2");
    check_grid(o.load.grid, order, world.size());
    if (o.init.rfind("file:", 0) == 0) {
      const io::ModelFileKind k = io::probe_model_file(o.init.substr(5));
      TESSERA_INPUT_CHECK(k.dims == dims,
                          "--init " << o.init << ": the model's dims " << format_dims(k.dims)
                                    << " are not the input's " << format_dims(dims));
    }
  });
}

void validate(const TuckerRunOptions& o, const comm::MpiCommunicator& world) {
  comm::run_collectively(world, [&] {
    check_tucker_options(o);
    check_grid(o.load.grid, 0, world.size());
    if (!o.ckpt.resume.empty())
      check_option_file(o.ckpt.resume, "--resume " + o.ckpt.resume, "a checkpoint (HDF5)");
  });
  const std::vector<std::uint64_t> dims = store_dims(o.load.path, world);
  if (dims.empty()) return;
  comm::run_collectively(world, [&] {
    algo::check_tucker_ranks(dims, algo::parse_ranks(o.ranks, static_cast<int>(dims.size())));
    check_grid(o.load.grid, static_cast<int>(dims.size()), world.size());
  });
}

void validate(const ContractRunOptions& o, const comm::MpiCommunicator& world) {
  comm::run_collectively(world, [&] { check_contract_options(o); });
}

}  // namespace tessera::run

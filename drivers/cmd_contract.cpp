// tessera contract: distributed sparse tensor contraction Z = X x Y by an einsum spec. The
// options of run::ContractRunOptions as flags; the run is run::run_contract
// (src/engine/run/contract.hpp; kernels/sptc.hpp, algo/contract.hpp, docs/sptc.md).
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "run/contract.hpp"

namespace tessera::driver {

void add_contract(CLI::App& app, Runner& run) {
  auto a = std::make_shared<ContractRunOptions>();
  auto* sub = app.add_subcommand(
      "contract",
      "Sparse tensor contraction Z = X x Y by an einsum spec, e.g. --einsum \"ijk,klm->ijlm\" "
      "(inputs .tns, .tns.gz or .h5)");
  sub->add_option("x", a->x, "First input X (.tns, .tns.gz or .h5)")->required();
  sub->add_option("y", a->y,
                  "Second input Y (the same file as X for a self-contraction: read once)")
      ->required();
  sub->add_option("-e,--einsum", a->einsum,
                  "Spec 'X,Y->Z': one letter per mode; letters in both inputs and not in the "
                  "output are summed, letters in both and in the output are batch modes; "
                  "e.g. ijk,klm->ijlm or ijy,kjy->ik")
      ->required();
  sub->add_option("-o,--out", a->out,
                  "Write Z here: .tns or .tns.gz (FROSTT text, 1-based) or .h5 (HDF5 tensor "
                  "store), in lexicographic order");
  sub->add_option("--mem-limit,--max-mem", a->mem_limit,
                  "Memory per rank the contraction may use, e.g. 8G (K/M/G/T = 1024^k); when the "
                  "output does not fit, it is made in pieces (written piece by piece with "
                  "--out); refused when even the inputs do not fit. Default: the planner's "
                  "measured host limit (tessera plan)");
  sub->add_flag("--extend-dims", a->extend_dims,
                "Give matched modes of unequal lengths the larger one (a .tns mode's length is "
                "its largest coordinate); without it unequal lengths are an error");
  add_compute_options(sub, a->run, a->load, kStrategyOption | kDryRunOption | kHierarchyOption);
  run_with(sub, a, run,
           []<typename T>(const ContractRunOptions& o, const comm::MpiCommunicator& w) {
             run::run_contract<T>(o, w);
           });
}

}  // namespace tessera::driver

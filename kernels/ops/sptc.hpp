// SpTC operations (spec, plan, output format: kernels/sptc.hpp): one declaration per
// operation, implemented by every backend (kernels/ops/common.hpp). Inputs and output are
// host COO tensors for every backend (a device backend copies them in and out).
#pragma once

#include <memory>

#include "kernels/ops/common.hpp"
#include "kernels/sptc.hpp"

/// Matches x and y (this rank's nonzeros, coordinates < dims) for `spec` and counts the
/// output exactly before any output memory is allocated: plan->count() gives the products,
/// the output entries and the bytes a run needs. x and y may be the same object
/// (self-contraction) and must outlive the plan. Throws InputError when their shapes do not
/// fit the spec.
#define TESSERA_CONTRACT_PLAN_OP(T)                                                        \
  std::unique_ptr<ContractPlan<T>> contract_plan(Backend<T>& be, const SparseTensor<T>& x, \
                                                 const SparseTensor<T>& y,                 \
                                                 const ContractSpec& spec)

/// Runs a plan made by this backend and returns the output on the host (sorted, no repeats,
/// no exact zeros). `stats` (may be null) receives the products, the output sizes and the
/// seconds of every phase, the plan's matching and counting included. Throws Error for a
/// plan of another backend.
#define TESSERA_CONTRACT_OP(T) \
  SparseTensor<T> contract(Backend<T>& be, ContractPlan<T>& plan, ContractStats* stats)

/// contract() writing the output into sink.output(...) instead of a new tensor. False, with
/// nothing run, when this backend or this plan's path has no such output (host backends);
/// the caller then runs contract().
#define TESSERA_CONTRACT_INTO_OP(T)                                               \
  bool contract_into(Backend<T>& be, ContractPlan<T>& plan, ContractStats* stats, \
                     ContractSink<T>& sink)

/// The backend side of a distributed contraction routed in backend memory over `ranks` ranks
/// (kernels/sptc.hpp, ContractRoute: algo::contract runs the collectives, on a device
/// communicator, between its steps): x and y are this rank's shares (global coordinates).
/// Null, with nothing done, when the backend has no such path for this spec (host backends;
/// the cuda backend for the sort assembly, keys over 64 bits, a row side without output
/// modes); the answer depends only on the spec and the dims, so every rank gets the same. x
/// and y must outlive the route.
#define TESSERA_CONTRACT_ROUTE_OP(T)                                                         \
  std::unique_ptr<ContractRoute<T>> contract_route(Backend<T>& be, const SparseTensor<T>& x, \
                                                   const SparseTensor<T>& y,                 \
                                                   const ContractSpec& spec, int ranks)

namespace tessera::kernels {

TESSERA_DECLARE_OP(TESSERA_CONTRACT_PLAN_OP)
TESSERA_DECLARE_OP(TESSERA_CONTRACT_OP)
TESSERA_DECLARE_OP(TESSERA_CONTRACT_INTO_OP)
TESSERA_DECLARE_OP(TESSERA_CONTRACT_ROUTE_OP)

namespace ops {

template <typename T>
inline TESSERA_CONTRACT_PLAN_OP(T) {
  TESSERA_DISPATCH(be, contract_plan, x, y, spec);
}
template <typename T>
inline TESSERA_CONTRACT_OP(T) {
  TESSERA_DISPATCH(be, contract, plan, stats);
}
template <typename T>
inline TESSERA_CONTRACT_INTO_OP(T) {
  TESSERA_DISPATCH(be, contract_into, plan, stats, sink);
}
template <typename T>
inline TESSERA_CONTRACT_ROUTE_OP(T) {
  TESSERA_DISPATCH(be, contract_route, x, y, spec, ranks);
}

}  // namespace ops
}  // namespace tessera::kernels

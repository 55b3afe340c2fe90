// The cuda:: definitions of the SpTC operations (kernels/ops/sptc.hpp): on the executor's
// context (runtime/backend.cuh); the work is in plan.cu and route.cu.
#include <memory>

#include "kernels/cuda/runtime/backend.cuh"
#include "kernels/ops/sptc.hpp"

namespace tessera::kernels::cuda {

template <typename T>
std::unique_ptr<ContractPlan<T>> contract_plan(Backend<T>& be, const SparseTensor<T>& x,
                                               const SparseTensor<T>& y, const ContractSpec& spec) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  return cuda::plan_contract(ctx, x, y, spec);
}
TESSERA_INSTANTIATE_OP(TESSERA_CONTRACT_PLAN_OP);

template <typename T>
SparseTensor<T> contract(Backend<T>& be, ContractPlan<T>& plan, ContractStats* stats) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  return cuda::contract(ctx, plan, stats);
}
TESSERA_INSTANTIATE_OP(TESSERA_CONTRACT_OP);

template <typename T>
bool contract_into(Backend<T>& be, ContractPlan<T>& plan, ContractStats* stats,
                   ContractSink<T>& sink) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  return cuda::contract_into(ctx, plan, stats, sink);
}
TESSERA_INSTANTIATE_OP(TESSERA_CONTRACT_INTO_OP);

// No DeviceGuard: the route's methods set the device themselves.
template <typename T>
std::unique_ptr<ContractRoute<T>> contract_route(Backend<T>& be, const SparseTensor<T>& x,
                                                 const SparseTensor<T>& y, const ContractSpec& spec,
                                                 int ranks) {
  return cuda::contract_route(executor(be).ctx(), x, y, spec, ranks);
}
TESSERA_INSTANTIATE_OP(TESSERA_CONTRACT_ROUTE_OP);

}  // namespace tessera::kernels::cuda

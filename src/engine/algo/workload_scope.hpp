// The workload a backend orders the copies of the tensors prepared in a scope for
// (kernels::Workload: TTMc's and completion's row Grams want each output row's nonzeros
// together; the MTTKRP may cut an input mode into L1-sized blocks), given back at its end.
#pragma once

#include "kernels/backend.hpp"

namespace tessera::algo {

template <typename T>
class WorkloadScope {
 public:
  WorkloadScope(kernels::Backend<T>& be, kernels::Workload w) : be_(be), was_(be.workload()) {
    be_.set_workload(w);
  }
  ~WorkloadScope() { be_.set_workload(was_); }
  WorkloadScope(const WorkloadScope&) = delete;
  WorkloadScope& operator=(const WorkloadScope&) = delete;

 private:
  kernels::Backend<T>& be_;
  kernels::Workload was_;
};

}  // namespace tessera::algo

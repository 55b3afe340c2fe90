// The ALS loop both cp_als overloads share: ||X|| and the loop's scale, the factor rows and
// their Grams, the iterations (host modes or the backend's device loop), the fit, the
// held-out RMSE, the states handed to on_iteration and the model. Internal to src/engine/algo
// (cp_als.cpp).
#pragma once

#include <vector>

#include "algo/cp_als.hpp"
#include "algo/cp_constraints.hpp"
#include "algo/cp_layout.hpp"
#include "comm/communicator.hpp"
#include "kernels/backend.hpp"
#include "partition/partition.hpp"
#include "util/timer.hpp"

namespace tessera::algo::detail {

/// The ALS loop. `X` holds this rank's nonzeros with coordinates relative to the held
/// chunks (lay[n].lo; 0 for allreduce), `dist` describes the global tensor and the
/// ownership, `lay` comes from make_layouts(dist, ...). `setup_timer` started before the
/// caller's own setup (prepare), which counts into phase "setup". `Xones` is the pattern
/// handle (observed_only), `hold` the held-out entries (holdout > 0).
template <typename T>
CpResult run_als(const kernels::TensorHandle<T>& X, const partition::Distribution& dist,
                 std::vector<ModeLayout>& lay, kernels::Backend<T>& be,
                 const comm::Communicator& ctrl, const comm::Communicator& data,
                 const CpOptions& opt, const Timer& setup_timer,
                 const kernels::TensorHandle<T>* Xones = nullptr, const Holdout* hold = nullptr);

}  // namespace tessera::algo::detail

// The "degenerate" stop reason of CP-ALS and Tucker-HOOI (docs/run-record.md): a run whose
// model is zero everywhere found nothing, however still its fit stood.
#pragma once

#include <string>

#include "util/log.hpp"

namespace tessera::algo {

/// Called with the final model's is_zero(): a zero model (every CP weight 0, e.g. --l1 or
/// --l2 large enough to zero the factors; a zero Tucker core) turns the stop reason
/// "converged" or "iteration limit" into "degenerate", `converged` false, with a warning on
/// rank 0 (a run stopped by its time limit or a signal keeps that reason, with the warning).
inline void flag_degenerate(bool zero, const char* what, std::string* stop_reason,
                            bool* converged) {
  if (!zero) return;
  if (*stop_reason == "converged" || *stop_reason == "iteration limit") {
    *stop_reason = "degenerate";
    *converged = false;
  }
  log::warn(std::string("degenerate run: the model is zero everywhere (") + what +
            "), so it explains nothing (stop reason 'degenerate', not converged); lower the "
            "penalties (--l1, --l2) or check the input");
}

}  // namespace tessera::algo

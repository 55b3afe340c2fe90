// Tucker-HOOI's --svd scalapack factor update: ScaLAPACK's pdgesvd on the row-distributed
// combined TTMc rows, over a BLACS P x 1 process grid. Without ScaLAPACK the grid is an
// empty placeholder and the update refuses with an InputError. Internal to src/engine/algo
// (tucker.cpp).
#pragma once

#include <vector>

#include "algo/tucker_dense.hpp"
#include "comm/communicator.hpp"

namespace tessera::algo::detail {

/// A BLACS P x 1 process grid over an MPI communicator, released on scope exit.
class BlacsGrid {
 public:
  explicit BlacsGrid(const comm::Communicator& c);
  ~BlacsGrid();
  BlacsGrid(const BlacsGrid&) = delete;
  BlacsGrid& operator=(const BlacsGrid&) = delete;
  int context() const { return ctxt_; }

 private:
  int handle_ = -1, ctxt_ = -1;
};

/// --svd scalapack: U (own_len x R, host) := the top R left singular vectors of the
/// combined rows Y (host), zero in the rows this rank does not hold; the caller
/// orthonormalises (through the backend) and completes undetermined columns.
template <typename T>
void update_scalapack(const T* Y, const RowsView& v, int R, std::vector<double>& U, Net& net,
                      const BlacsGrid& grid);

}  // namespace tessera::algo::detail

// Every operation of the backends (kernels/ops/*.hpp): what algorithms call, as
// kernels::ops::<name>(backend, ...). See kernels/ops/common.hpp for how they are declared
// and dispatched.
#pragma once

#include "kernels/ops/apr.hpp"
#include "kernels/ops/cp_device.hpp"
#include "kernels/ops/dense.hpp"
#include "kernels/ops/gcp.hpp"
#include "kernels/ops/mttkrp.hpp"
#include "kernels/ops/row_update.hpp"
#include "kernels/ops/sptc.hpp"
#include "kernels/ops/streamed.hpp"
#include "kernels/ops/ttmc.hpp"
#include "kernels/ops/tucker_dense.hpp"

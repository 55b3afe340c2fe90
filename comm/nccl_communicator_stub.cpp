// CPU-only build: the NCCL entry points exist and say why they cannot run.
#include "comm/nccl_communicator.hpp"
#include "util/error.hpp"

namespace tessera::comm {

bool nccl_available() {
  return false;
}

std::unique_ptr<Communicator> make_nccl_communicator(const MpiCommunicator&, const NcclOptions&) {
  TESSERA_THROW(
      "NCCL communicator requested, but Tessera was built without CUDA "
      "(reconfigure with -DTESSERA_WITH_CUDA=ON on a machine with the CUDA toolkit and NCCL)");
}

}  // namespace tessera::comm

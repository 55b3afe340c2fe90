// Where a buffer lives: host memory or a device's. Shared by the communicators (comm/,
// which re-exports it as comm::MemorySpace) and the compute backends (kernels/).
#pragma once

namespace tessera {

/// Where a communicator's or a backend's buffers live.
enum class MemorySpace { host, device };

}  // namespace tessera

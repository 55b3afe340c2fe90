# tests for io: FROSTT .tns reader/writer (tessera::io) and tensor statistics.

# One process: syntax, chunk boundaries, value round trips, writer errors, statistics.
tessera_test_executable(io_unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/io_tns_test.cpp
          ${CMAKE_CURRENT_SOURCE_DIR}/unit/io_stats_test.cpp
  LIBS tessera::io ZLIB::ZLIB)
tessera_add_test(io_unit io_unit LABELS io)

# Across ranks: round trips, line ownership, global line numbers in collective errors,
# real tensors from ../shared/data.
tessera_test_executable(io_tns_mpi
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mpi/io_tns_mpi_test.cpp
  LIBS tessera::io ZLIB::ZLIB)
foreach(np 1 2 3 4)
  tessera_add_mpi_test(io_tns_mpi io_tns_mpi RANKS ${np} LABELS io)
endforeach()

# The output policy (src/base/io/output.hpp): same-file refusals, special files, probes, stale
# temporaries, the replace rule; alone and on 2 ranks (the collective validate).
tessera_test_executable(io_output_unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/io_output_test.cpp
  LIBS tessera::io)
tessera_add_test(io_output_unit io_output_unit LABELS io)
tessera_add_mpi_test(io_output io_output_unit RANKS 2 LABELS io)

# Tensor Toolbox (pyttb / MATLAB export_data) sptensor text through read_tns, and the .npy
# writer of `tessera export` (src/base/io/pyttb_text.hpp, src/base/io/npy.hpp).
tessera_test_executable(io_pyttb_unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/io_pyttb_test.cpp
  LIBS tessera::io ZLIB::ZLIB)
tessera_add_test(io_pyttb_unit io_pyttb_unit LABELS io)

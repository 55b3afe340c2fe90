# Algorithm tests: CP-ALS under MPI at 1, 2, 3 and 4 ranks.
tessera_test_executable(algo_cp_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mpi/algo_cp_test.cpp
  LIBS tessera::algo)
foreach(np 1 2 3 4)
  tessera_add_mpi_test(algo_cp algo_cp_test RANKS ${np})
endforeach()
# Hierarchical collectives (comm/hierarchy.hpp) and CP-ALS over them, on two emulated nodes.
tessera_test_executable(comm_hierarchy_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mpi/comm_hierarchy_test.cpp LIBS tessera::algo)
foreach(np 2 4)
  tessera_add_mpi_test(comm_hierarchy comm_hierarchy_test RANKS ${np})
endforeach()
# Tucker-HOOI under MPI at 1, 2, 3 and 4 ranks.
tessera_test_executable(algo_tucker_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mpi/algo_tucker_test.cpp
  LIBS tessera::algo)
foreach(np 1 2 3 4)
  tessera_add_mpi_test(algo_tucker algo_tucker_test RANKS ${np})
endforeach()
# Constrained, regularised and weighted CP under MPI at 1, 2 and 3 ranks.
tessera_test_executable(algo_cp_constrained_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mpi/algo_cp_constrained_test.cpp LIBS tessera::algo)
foreach(np 1 2 3)
  tessera_add_mpi_test(algo_cp_constrained algo_cp_constrained_test RANKS ${np})
endforeach()

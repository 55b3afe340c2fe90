# Partition tests: helpers on one process, distribute() under mpiexec on 1..5 ranks
# (3 and 5 catch grids and ranges that only work for powers of two).
tessera_test_executable(partition_unit_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/partition_unit.cpp
  LIBS tessera::partition)
tessera_add_test(partition_unit partition_unit_tests)

tessera_test_executable(partition_mpi_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mpi/partition_distribute.cpp
  LIBS tessera::partition)
foreach(np 1 2 3 4 5)
  tessera_add_mpi_test(partition_distribute partition_mpi_tests RANKS ${np})
endforeach()

tessera_test_executable(partition_relabel_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/partition_relabel.cpp
  LIBS tessera::partition)
tessera_add_test(partition_relabel partition_relabel_tests)

# tests for util: progress reports (text of lines and bars, quiet mode).
tessera_test_executable(util_unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/progress_test.cpp
  LIBS tessera::core)
tessera_add_test(util_unit util_unit LABELS util)

# GPU tests (label gpu): the CUDA backend against the reference backend (memory tiers 1
# and 2), and the NCCL communicator against the MPI communicator at 1 and 2 ranks. Built
# only with TESSERA_WITH_CUDA; without a visible GPU (or with fewer GPUs than ranks)
# every test skips with a message, and ctest reports the run as skipped rather than
# passed. With TESSERA_SHARE_GPU=1 the multi-rank tests run with several ranks on a GPU
# (NCCL over sockets between them; docs/multi-gpu.md, "Several ranks on one GPU").
set(_tessera_gpu_skip "no CUDA device visible|fewer GPUs than ranks")

tessera_test_executable(gpu_backend_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_backend.cpp
  LIBS tessera::algo)
tessera_add_test(gpu_backend gpu_backend_tests LABELS gpu)
set_tests_properties(gpu_backend PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")
# The skip pattern marks a whole entry skipped whatever its exit code, so the tests of these
# binaries that need no GPU also run alone, where nothing prints it: a failure without a GPU
# (the factory's refusal, the host backends' budget) fails the run.
tessera_add_test(gpu_backend_host gpu_backend_tests ARGS --gtest_filter=CudaBackendFactory.*)

tessera_test_executable(gpu_counts_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_counts.cpp
  LIBS tessera::algo)
tessera_add_test(gpu_counts gpu_counts_tests LABELS gpu)
set_tests_properties(gpu_counts PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")

tessera_test_executable(gpu_nccl_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_nccl.cpp
  LIBS tessera::algo)
foreach(np 1 2)
  tessera_add_mpi_test(gpu_nccl gpu_nccl_tests RANKS ${np} LABELS gpu)
  set_tests_properties(gpu_nccl_np${np} PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")
endforeach()

tessera_test_executable(gpu_cp_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_cp.cpp
  LIBS tessera::algo)
foreach(np 1 2 4)
  tessera_add_mpi_test(gpu_cp gpu_cp_tests RANKS ${np} LABELS gpu)
  set_tests_properties(gpu_cp_np${np} PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")
endforeach()

# The tensor-core MTTKRP (hybrid layout, every precision) against an FP64 reference, its
# policy and reports, and CP-ALS fits with tensor cores against CUDA cores (one GPU).
tessera_test_executable(gpu_tc_mttkrp_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_tc_mttkrp.cpp
  LIBS tessera::algo)
tessera_add_mpi_test(gpu_tc_mttkrp gpu_tc_mttkrp_tests RANKS 1 LABELS gpu)
set_tests_properties(gpu_tc_mttkrp_np1 PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")

# Memory tiers (DESIGN §8): tier 2 forced by small budgets against tier 1 and the
# reference backend; CP-ALS in tier 1 and tier 2 (also at 2 ranks, one GPU each).
tessera_test_executable(gpu_tier_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_tier.cpp
  LIBS tessera::algo)
tessera_add_mpi_test(gpu_tier gpu_tier_tests RANKS 1 LABELS gpu)
set_tests_properties(gpu_tier_np1 PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")
tessera_add_mpi_test(gpu_tier_host gpu_tier_tests RANKS 1 ARGS --gtest_filter=HostTier/*)
tessera_add_mpi_test(gpu_tier_cp gpu_tier_tests RANKS 2 ARGS --gtest_filter=GpuTierCp.*
  LABELS gpu)
set_tests_properties(gpu_tier_cp_np2 PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")

# Memory tier 3 on the cuda backend: a DiskTensor through its StreamedOps hooks (MTTKRP
# through mttkrp_accumulate, in pieces under a small budget; TTMc chunks prepared in tier 1
# or 2)
# against cuda tier 1 and the reference backend; mttkrp_accumulate itself (orders 2-5,
# every sort path, known nonzero output, bad coordinates); CP-ALS in tier 3 against tier 1
# on one GPU, and CP-ALS in tier 2 (host chunks) on the device loop, its chunk copies in the
# CUDA graph, against tier 1 and the per-operation path.
tessera_test_executable(gpu_tier3_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_tier3.cpp
  LIBS tessera::algo tessera::io)
tessera_add_mpi_test(gpu_tier3 gpu_tier3_tests RANKS 1 LABELS gpu)
set_tests_properties(gpu_tier3_np1 PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")
tessera_add_mpi_test(gpu_tier3_cp gpu_tier3_tests RANKS 2 ARGS --gtest_filter=GpuTier2Cp.*
  LABELS gpu)
set_tests_properties(gpu_tier3_cp_np2 PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")

# Host-side parallel sorts of the CUDA backend (kernels/cuda/runtime/host_sort.cpp) against
# std::stable_sort. Host only: the binary compiles host_sort.cpp itself and does not link
# the CUDA backend, so it runs (and must pass) on machines without a GPU.
tessera_test_executable(host_sort_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/host_sort_test.cpp
          ${PROJECT_SOURCE_DIR}/kernels/cuda/runtime/host_sort.cpp
  LIBS tessera::core OpenMP::OpenMP_CXX)
target_include_directories(host_sort_tests PRIVATE ${PROJECT_SOURCE_DIR})
tessera_add_test(gpu_host_sort host_sort_tests LABELS gpu)

# Building the sorted copies (device sort in tier 1, host sort in tier 1 and tier 2)
# against the reference backend: repeated indices, long rows, wide keys, orders 1 to 9.
tessera_test_executable(gpu_prepare_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_prepare.cpp
  LIBS tessera::algo)
tessera_add_test(gpu_prepare gpu_prepare_tests LABELS gpu)
set_tests_properties(gpu_prepare PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")

# Synthetic tensors generated on the device (Backend::prepare_synthetic) against the
# same tensor built on the host and prepared by the reference backend; the fallbacks
# (COO on the host, host sort, tier 2) likewise.
tessera_test_executable(gpu_synthetic_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_synthetic.cpp
  LIBS tessera::algo)
tessera_add_test(gpu_synthetic gpu_synthetic_tests LABELS gpu)
set_tests_properties(gpu_synthetic PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")

# Blocked layouts of the CUDA MTTKRP (shared-memory tiles, one mode kept in L2), forced
# with small tiles, against the reference backend; the automatic choice on two shapes.
tessera_test_executable(gpu_layout_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_layout.cpp
  LIBS tessera::algo)
tessera_add_test(gpu_layout gpu_layout_tests LABELS gpu)
set_tests_properties(gpu_layout PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")

# SpTC on the cuda backend (kernels/cuda/sptc/) against the reference backend: random
# specs, float and double, cancellation, empty results, self-contraction, ~1e6 products,
# keys over 64 bits (cpu fallback), both assemblies and every row class, the tensor-core
# path (forced on, off, mixed; fp64, tf32, bf16, fp16), congress "ijy,kjy->ik".
tessera_test_executable(gpu_sptc_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_sptc.cpp
  LIBS tessera::algo tessera::io)
tessera_add_test(gpu_sptc gpu_sptc_tests LABELS gpu)
set_tests_properties(gpu_sptc PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")

# TTMc (CUDA kernel, every layout and tier) and Tucker's wide products against the
# reference backend; Tucker-HOOI on 1 and 2 GPUs (NCCL sums) against the CPU backend.
tessera_test_executable(gpu_ttmc_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_ttmc.cpp
  LIBS tessera::algo)
tessera_add_mpi_test(gpu_ttmc gpu_ttmc_tests RANKS 1 LABELS gpu)
set_tests_properties(gpu_ttmc_np1 PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")
tessera_add_mpi_test(gpu_tucker gpu_ttmc_tests RANKS 2 ARGS --gtest_filter=GpuTucker.*
  LABELS gpu)
set_tests_properties(gpu_tucker_np2 PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")

# Distributed SpTC with the nonzeros routed over NCCL (ContractOptions::data) against the
# reference backend on the whole tensors and against routing over MPI, on 1 and 2 GPUs.
tessera_test_executable(gpu_contract_nccl_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_contract_nccl.cpp
  LIBS tessera::algo tessera::comm)
foreach(np 1 2)
  tessera_add_mpi_test(gpu_contract_nccl gpu_contract_nccl_tests RANKS ${np} LABELS gpu)
  set_tests_properties(gpu_contract_nccl_np${np} PROPERTIES
    SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")
endforeach()

# Tucker-HOOI's dense stage on the device (kernels/cuda/dense/tucker_dense.cu): every operation
# of it (kernels/ops/tucker_dense.hpp) against the cpu backend's host implementation;
# Tucker-HOOI (gram, subspace; float, double; also on a streamed host-chunk handle) against
# the cpu backend in fits, core norm, factor spans and model values, and the singular-Gram
# fallback, on 1 and 2 GPUs.
tessera_test_executable(gpu_tucker_dense_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_tucker_dense.cpp
  LIBS tessera::algo)
foreach(np 1 2)
  tessera_add_mpi_test(gpu_tucker_dense gpu_tucker_dense_tests RANKS ${np} LABELS gpu)
  set_tests_properties(gpu_tucker_dense_np${np} PROPERTIES
    SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")
endforeach()

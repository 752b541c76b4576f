# The CUDA LSH attention kernels (codegen/kernels/cuda/attnc/lsh.cuh): NVRTC
# builds for sm_70 (with the CUDA 12 NVRTC), sm_75, sm_80 and sm_90 with ptxas
# resource checks, and their numerics on a host emulation of a CUDA block
# (test/unit/CudaEmulator.h) against a double-precision reference, see
# test/unit/CudaLshTest.cpp.
# Needs NVRTC and Linux ucontext, no GPU.
add_executable(attnc-cuda-lsh-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/CudaLshTest.cpp)
list(GET CUDAToolkit_INCLUDE_DIRS 0 ATTNC_LSH_TEST_CUDA_INCLUDE_DIR)
target_compile_definitions(attnc-cuda-lsh-tests PRIVATE
  ATTNC_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
  ATTNC_CUDA_INCLUDE_DIR="${ATTNC_LSH_TEST_CUDA_INCLUDE_DIR}")
# The emulation half compiles the kernel headers with the host compiler.
target_include_directories(attnc-cuda-lsh-tests PRIVATE
  ${PROJECT_SOURCE_DIR}/codegen/kernels/common ${PROJECT_SOURCE_DIR}/codegen/kernels/cuda
  ${PROJECT_SOURCE_DIR}/codegen/kernels/emulator
  ${CUDAToolkit_INCLUDE_DIRS})
target_compile_options(attnc-cuda-lsh-tests PRIVATE -Wall -Wextra -Wno-unknown-pragmas
  -fno-strict-aliasing) # emulated shared memory is one byte array, typed many ways
target_link_libraries(attnc-cuda-lsh-tests PRIVATE AttncRuntime GTest::gtest_main)
# One NVRTC test per (arch, dtype), a few seconds each; emulated cases are
# one test each.
gtest_discover_tests(attnc-cuda-lsh-tests DISCOVERY_MODE PRE_TEST NO_PRETTY_VALUES
  PROPERTIES TIMEOUT 300)

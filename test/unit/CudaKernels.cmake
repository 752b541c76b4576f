# NVRTC builds of every CUDA attention kernel for sm_70 (with the CUDA 12
# NVRTC), sm_75, sm_80 and sm_90 with ptxas resource checks, and the kernels'
# numerics on a host emulation of a CUDA block (SIMT and tensor-core paths,
# asynchronous copies), see test/unit/CudaKernelsTest.cpp; the same on
# Volta's path (m8n8k4, register-staged copies) in CudaKernelsVoltaTest.cpp.
# Needs NVRTC and Linux ucontext, no GPU.
add_executable(attnc-cuda-kernel-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/CudaKernelsTest.cpp)
# Where the kernel headers and the toolkit's cuda_fp16.h / cuda_bf16.h are.
list(GET CUDAToolkit_INCLUDE_DIRS 0 ATTNC_TEST_CUDA_INCLUDE_DIR)
target_compile_definitions(attnc-cuda-kernel-tests PRIVATE
  ATTNC_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
  ATTNC_CUDA_INCLUDE_DIR="${ATTNC_TEST_CUDA_INCLUDE_DIR}")
# The host-emulation half of the test compiles the kernel headers itself.
target_include_directories(attnc-cuda-kernel-tests PRIVATE
  ${PROJECT_SOURCE_DIR}/codegen/kernels/common ${PROJECT_SOURCE_DIR}/codegen/kernels/cuda
  ${PROJECT_SOURCE_DIR}/codegen/kernels/emulator
  ${CUDAToolkit_INCLUDE_DIRS})
target_compile_options(attnc-cuda-kernel-tests PRIVATE -Wall -Wextra -Wno-unknown-pragmas
  -fno-strict-aliasing) # emulated shared memory is one byte array, typed many ways
target_link_libraries(attnc-cuda-kernel-tests PRIVATE AttncRuntime GTest::gtest_main)
# One test per (arch, dtype, head dim) cell, a few seconds each.
gtest_discover_tests(attnc-cuda-kernel-tests DISCOVERY_MODE PRE_TEST NO_PRETTY_VALUES
  PROPERTIES TIMEOUT 300)

# Volta's path on the emulator (ATTNC_EMULATE_ARCH=700 in the source).
add_executable(attnc-cuda-volta-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/CudaKernelsVoltaTest.cpp)
target_include_directories(attnc-cuda-volta-tests PRIVATE
  ${PROJECT_SOURCE_DIR}/codegen/kernels/common ${PROJECT_SOURCE_DIR}/codegen/kernels/cuda
  ${PROJECT_SOURCE_DIR}/codegen/kernels/emulator
  ${CUDAToolkit_INCLUDE_DIRS})
target_compile_options(attnc-cuda-volta-tests PRIVATE -Wall -Wextra -Wno-unknown-pragmas
  -fno-strict-aliasing)
target_link_libraries(attnc-cuda-volta-tests PRIVATE AttncRuntime GTest::gtest_main)
gtest_discover_tests(attnc-cuda-volta-tests DISCOVERY_MODE PRE_TEST NO_PRETTY_VALUES
  PROPERTIES TIMEOUT 300)

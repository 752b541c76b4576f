# The device optimizer kernels (codegen/kernels/cuda/attnc/optimizer.cuh):
# NVRTC builds for sm_70 (CUDA 12 NVRTC), sm_75, sm_80 and sm_90 with ptxas resource checks, and
# their numerics on the host block emulator against runtime/train's CPU
# AdamW, see test/unit/CudaOptimizerTest.cpp. Needs NVRTC and Linux
# ucontext, no GPU. The CPU optimizer, the host helpers and the loss scaler
# are compiled here directly (not through AttncTrain).
add_executable(attnc-cuda-optimizer-tests
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/CudaOptimizerTest.cpp
  ${PROJECT_SOURCE_DIR}/runtime/train/Optimizer.cpp
  ${PROJECT_SOURCE_DIR}/runtime/train/DeviceOptimizer.cpp
  ${PROJECT_SOURCE_DIR}/runtime/train/LossScaler.cpp)
target_compile_definitions(attnc-cuda-optimizer-tests PRIVATE
  ATTNC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
# The emulation half compiles the kernel header with the host compiler.
target_include_directories(attnc-cuda-optimizer-tests PRIVATE ${PROJECT_SOURCE_DIR}
  ${PROJECT_SOURCE_DIR}/codegen/kernels/common ${PROJECT_SOURCE_DIR}/codegen/kernels/cuda
  ${PROJECT_SOURCE_DIR}/codegen/kernels/emulator
  ${CUDAToolkit_INCLUDE_DIRS})
# No -march=native: the kernels and the CPU AdamW round every operation
# (no FMA contraction), which the test's bit-for-bit count relies on.
target_compile_options(attnc-cuda-optimizer-tests PRIVATE -Wall -Wextra -Wno-unknown-pragmas
  -fno-strict-aliasing) # emulated shared memory is one byte array
target_link_libraries(attnc-cuda-optimizer-tests PRIVATE AttncRuntime GTest::gtest_main)
gtest_discover_tests(attnc-cuda-optimizer-tests DISCOVERY_MODE PRE_TEST
  PROPERTIES TIMEOUT 300)

# The kernels around the attention kernels in a training step
# (codegen/kernels/cuda/attnc/device_support.cuh: the low-rank projections'
# strided GEMM and the fp32 <-> fp16/bf16 conversions): NVRTC builds for
# sm_70 (CUDA 12 NVRTC), sm_75, sm_80 and sm_90 with ptxas resource checks, and their numerics on
# the SIMT emulator against double-precision references, see
# test/unit/DeviceSupportTest.cpp. Needs NVRTC and Linux ucontext, no GPU.
add_executable(attnc-device-support-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/DeviceSupportTest.cpp)
target_compile_definitions(attnc-device-support-tests PRIVATE
  ATTNC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
target_include_directories(attnc-device-support-tests PRIVATE ${PROJECT_SOURCE_DIR}
  ${PROJECT_SOURCE_DIR}/codegen/kernels/common ${PROJECT_SOURCE_DIR}/codegen/kernels/cuda
  ${PROJECT_SOURCE_DIR}/codegen/kernels/emulator
  ${CUDAToolkit_INCLUDE_DIRS})
target_compile_options(attnc-device-support-tests PRIVATE -Wall -Wextra -Wno-unknown-pragmas
  -fno-strict-aliasing) # emulated shared memory is one byte array
target_link_libraries(attnc-device-support-tests PRIVATE AttncRuntime GTest::gtest_main)
gtest_discover_tests(attnc-device-support-tests DISCOVERY_MODE PRE_TEST
  PROPERTIES TIMEOUT 300)

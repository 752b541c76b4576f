# The fixed kernels of a generated CUDA training step
# (codegen/kernels/cuda/attnc/model_step.cuh): their numerics on the host
# block emulator against a double-precision reference, see
# test/unit/CudaModelStepTest.cpp. Needs Linux ucontext, no GPU and no NVRTC.
add_executable(attnc-cuda-model-step-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/CudaModelStepTest.cpp)
# The kernel header compiled by the host compiler (cuda_fp16.h from the
# toolkit, through the emulator).
target_include_directories(attnc-cuda-model-step-tests PRIVATE ${PROJECT_SOURCE_DIR}
  ${PROJECT_SOURCE_DIR}/codegen/kernels/common ${PROJECT_SOURCE_DIR}/codegen/kernels/cuda
  ${PROJECT_SOURCE_DIR}/codegen/kernels/emulator
  ${CUDAToolkit_INCLUDE_DIRS})
target_compile_options(attnc-cuda-model-step-tests PRIVATE -Wall -Wextra -Wno-unknown-pragmas
  -Wno-cast-qual -fno-strict-aliasing) # the kernels cast attnc_kargs pointers; emulated shared memory is one byte array
target_link_libraries(attnc-cuda-model-step-tests PRIVATE GTest::gtest_main)
gtest_discover_tests(attnc-cuda-model-step-tests DISCOVERY_MODE PRE_TEST
  PROPERTIES TIMEOUT 300)

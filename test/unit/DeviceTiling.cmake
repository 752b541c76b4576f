# Fitting compiled attention tiles to the GPU present (runtime/DeviceTiling.h)
# on simulated sm_75 / sm_86 / sm_90 devices, and NVRTC builds of the
# re-tiled kernels. Included from test/CMakeLists.txt; needs NVRTC, no GPU
# and no MLIR.
#
#   attnc-device-tiling-tests
add_executable(attnc-device-tiling-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/DeviceTilingTest.cpp)
list(GET CUDAToolkit_INCLUDE_DIRS 0 ATTNC_TEST_CUDA_INCLUDE_DIR)
target_compile_definitions(attnc-device-tiling-tests PRIVATE
  ATTNC_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
  ATTNC_CUDA_INCLUDE_DIR="${ATTNC_TEST_CUDA_INCLUDE_DIR}")
target_link_libraries(attnc-device-tiling-tests PRIVATE AttncRuntime GTest::gtest_main)
target_compile_options(attnc-device-tiling-tests PRIVATE -Wall -Wextra)
gtest_discover_tests(attnc-device-tiling-tests DISCOVERY_MODE PRE_TEST
  PROPERTIES TIMEOUT 300
  ENVIRONMENT "ATTNC_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/device-tiling-cache")

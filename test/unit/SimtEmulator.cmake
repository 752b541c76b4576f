# The host CUDA emulator's own checks (codegen/kernels/emulator/attnc:
# schedules, warp-collective masks, ldmatrix / cp.async address checks),
# each against a tiny kernel that breaks it, see
# test/unit/SimtEmulatorTest.cpp. Needs Linux ucontext, no GPU and no NVRTC.
add_executable(attnc-simt-emulator-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/SimtEmulatorTest.cpp)
target_include_directories(attnc-simt-emulator-tests PRIVATE
  ${PROJECT_SOURCE_DIR}/codegen/kernels/common ${PROJECT_SOURCE_DIR}/codegen/kernels/cuda
  ${PROJECT_SOURCE_DIR}/codegen/kernels/emulator
  ${CUDAToolkit_INCLUDE_DIRS})
# UBSan's alignment check stands in for the GPU's trap on a misaligned
# vector access (the kernels' float4 / uint2 / uint4 loads and stores).
target_compile_definitions(attnc-simt-emulator-tests PRIVATE ATTNC_EMU_TEST_UBSAN_ALIGNMENT=1)
target_compile_options(attnc-simt-emulator-tests PRIVATE -Wall -Wextra -Wno-unknown-pragmas
  -fno-strict-aliasing -fsanitize=alignment -fno-sanitize-recover=alignment)
target_link_options(attnc-simt-emulator-tests PRIVATE -fsanitize=alignment)
target_link_libraries(attnc-simt-emulator-tests PRIVATE GTest::gtest_main)
gtest_discover_tests(attnc-simt-emulator-tests DISCOVERY_MODE PRE_TEST
  PROPERTIES TIMEOUT 120)

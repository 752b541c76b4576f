# The host CUDA emulator's own checks (codegen/kernels/emulator/attnc:
# schedules, warp-collective masks), each against a tiny kernel that breaks
# it, see test/unit/SimtEmulatorTest.cpp. Needs Linux ucontext, no GPU and
# no NVRTC.
add_executable(attnc-simt-emulator-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/SimtEmulatorTest.cpp)
target_include_directories(attnc-simt-emulator-tests PRIVATE
  ${PROJECT_SOURCE_DIR}/codegen/kernels/common ${PROJECT_SOURCE_DIR}/codegen/kernels/cuda
  ${PROJECT_SOURCE_DIR}/codegen/kernels/emulator
  ${CUDAToolkit_INCLUDE_DIRS})
target_compile_options(attnc-simt-emulator-tests PRIVATE -Wall -Wextra -Wno-unknown-pragmas
  -fno-strict-aliasing)
target_link_libraries(attnc-simt-emulator-tests PRIVATE GTest::gtest_main)
gtest_discover_tests(attnc-simt-emulator-tests DISCOVERY_MODE PRE_TEST
  PROPERTIES TIMEOUT 120)

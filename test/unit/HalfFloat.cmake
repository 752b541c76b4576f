# The runtime's fp16/bf16 conversions against cuda_fp16.h's, and the
# emulated CUDA step's GEMM input rounding. Included from test/CMakeLists.txt;
# no MLIR, no GPU.
add_executable(attnc-half-float-tests
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/HalfFloatTest.cpp)
target_include_directories(attnc-half-float-tests PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(attnc-half-float-tests PRIVATE AttncTrain GTest::gtest_main)
target_compile_options(attnc-half-float-tests PRIVATE -Wall -Wextra)
gtest_discover_tests(attnc-half-float-tests DISCOVERY_MODE PRE_TEST)

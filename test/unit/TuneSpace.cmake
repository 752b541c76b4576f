# The tile search space of attnc tune (codegen/TuneSpace.h): header-only,
# no MLIR, no GPU.
add_executable(attnc-tune-space-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/TuneSpaceTest.cpp)
target_include_directories(attnc-tune-space-tests PRIVATE ${PROJECT_SOURCE_DIR}
  ${PROJECT_SOURCE_DIR}/codegen/kernels/common ${PROJECT_SOURCE_DIR}/codegen/kernels/cpu)
target_compile_options(attnc-tune-space-tests PRIVATE -Wall -Wextra)
target_link_libraries(attnc-tune-space-tests PRIVATE GTest::gtest_main)
gtest_discover_tests(attnc-tune-space-tests DISCOVERY_MODE PRE_TEST)

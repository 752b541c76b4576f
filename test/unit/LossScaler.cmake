# Dynamic loss scaling (runtime/train/LossScaler.h): the state machine and
# its checkpoint JSON. Included from test/CMakeLists.txt; needs no MLIR and
# no GPU. The source is compiled here directly (not through AttncTrain) so
# the test builds on its own.
add_executable(attnc-loss-scaler-tests
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/LossScalerTest.cpp
  ${PROJECT_SOURCE_DIR}/runtime/train/LossScaler.cpp)
target_include_directories(attnc-loss-scaler-tests PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(attnc-loss-scaler-tests PRIVATE AttncRuntime GTest::gtest_main)
target_compile_options(attnc-loss-scaler-tests PRIVATE -Wall -Wextra)
gtest_discover_tests(attnc-loss-scaler-tests DISCOVERY_MODE PRE_TEST)

# The training optimizer (AdamW, schedule, clipping) and checkpoints
# (runtime/train/Optimizer.h, Checkpoint.h). Included from
# test/CMakeLists.txt; needs no MLIR and no GPU. The two sources are compiled
# here directly (not through AttncTrain) so the tests build on their own.
#
#   attnc-train-optimizer-tests   includes a fork()+SIGKILL crash test of
#                                 checkpoint writing (~20 MB files, a few s)
add_executable(attnc-train-optimizer-tests
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/TrainOptimizerTest.cpp
  ${PROJECT_SOURCE_DIR}/runtime/train/Optimizer.cpp
  ${PROJECT_SOURCE_DIR}/runtime/train/Checkpoint.cpp)
target_include_directories(attnc-train-optimizer-tests PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(attnc-train-optimizer-tests PRIVATE AttncRuntime GTest::gtest_main)
target_compile_options(attnc-train-optimizer-tests PRIVATE -Wall -Wextra)
gtest_discover_tests(attnc-train-optimizer-tests DISCOVERY_MODE PRE_TEST
                     PROPERTIES TIMEOUT 120)

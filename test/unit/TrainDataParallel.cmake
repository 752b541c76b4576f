# Data parallelism's arithmetic (runtime/train/DataParallel.h) in one
# process: micro-batch slicing, the target-weighted combination, the order
# of the sum, and the errors. Included from test/CMakeLists.txt; needs no
# MLIR, GPU or MPI (mpirun runs are test/train/data-parallel.test).
add_executable(attnc-train-data-parallel-tests
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/TrainDataParallelTest.cpp)
target_include_directories(attnc-train-data-parallel-tests PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(attnc-train-data-parallel-tests PRIVATE AttncTrain GTest::gtest_main)
target_compile_options(attnc-train-data-parallel-tests PRIVATE -Wall -Wextra)
gtest_discover_tests(attnc-train-data-parallel-tests DISCOVERY_MODE PRE_TEST
                     PROPERTIES TIMEOUT 60)

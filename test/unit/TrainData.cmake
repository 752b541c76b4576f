# Training data (runtime/train/Data.h): byte corpora, causal-LM / MLM batches
# and the duplication task. Included from test/CMakeLists.txt; needs no MLIR,
# no GPU and no BLAS. Compiles Data.cpp itself so it does not wait on the rest
# of the AttncTrain library.
#
#   attnc-train-data-tests
add_executable(attnc-train-data-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/TrainDataTest.cpp
               ${PROJECT_SOURCE_DIR}/runtime/train/Data.cpp)
target_link_libraries(attnc-train-data-tests PRIVATE AttncRuntime GTest::gtest_main)
target_compile_options(attnc-train-data-tests PRIVATE -Wall -Wextra)
gtest_discover_tests(attnc-train-data-tests DISCOVERY_MODE PRE_TEST)

# Evaluation over a forward function and the parameter store
# (runtime/train/Trainer.h, Parameters.h) against references written in the
# test. Included from test/CMakeLists.txt; needs no MLIR and no GPU.
#
#   attnc-train-eval-tests
add_executable(attnc-train-eval-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/TrainEvalTest.cpp)
target_link_libraries(attnc-train-eval-tests PRIVATE AttncTrain GTest::gtest_main)
target_compile_options(attnc-train-eval-tests PRIVATE -Wall -Wextra)
gtest_discover_tests(attnc-train-eval-tests DISCOVERY_MODE PRE_TEST)

# Training settings from flags, the spec's train block and the defaults
# (runtime/train/TrainSettings.h). Included from test/CMakeLists.txt; needs
# no MLIR and no GPU.
#
#   attnc-train-settings-tests
add_executable(attnc-train-settings-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/TrainSettingsTest.cpp)
target_link_libraries(attnc-train-settings-tests PRIVATE AttncTrain GTest::gtest_main)
target_compile_options(attnc-train-settings-tests PRIVATE -Wall -Wextra)
gtest_discover_tests(attnc-train-settings-tests DISCOVERY_MODE PRE_TEST)

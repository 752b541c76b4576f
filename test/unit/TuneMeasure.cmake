# The tuner's measuring half (runtime/tune/Measure.h): the final round's
# rule, medians, random attention inputs. Included from test/CMakeLists.txt;
# needs no MLIR and no GPU.
#
#   attnc-tune-measure-tests
add_executable(attnc-tune-measure-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/TuneMeasureTest.cpp)
target_link_libraries(attnc-tune-measure-tests PRIVATE AttncTune GTest::gtest_main)
target_compile_options(attnc-tune-measure-tests PRIVATE -Wall -Wextra)
gtest_discover_tests(attnc-tune-measure-tests DISCOVERY_MODE PRE_TEST)

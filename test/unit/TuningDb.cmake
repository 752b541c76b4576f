# The tuning database (runtime/tune/TuningDb.h): round trips, merge of
# concurrent savers, resumed measurements, pinned export/import. Included
# from test/CMakeLists.txt; needs no MLIR and no GPU. Compiles TuningDb.cpp
# itself so it does not depend on the AttncTune library being listed.
#
#   attnc-tuning-db-tests
add_executable(attnc-tuning-db-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/TuningDbTest.cpp
               ${PROJECT_SOURCE_DIR}/runtime/tune/TuningDb.cpp)
target_link_libraries(attnc-tuning-db-tests PRIVATE AttncRuntime GTest::gtest_main)
target_compile_options(attnc-tuning-db-tests PRIVATE -Wall -Wextra)
gtest_discover_tests(attnc-tuning-db-tests DISCOVERY_MODE PRE_TEST)

# attnc's C ABI (bindings/c): the public header and libattnc.so alone,
# against a double reference. Included from test/CMakeLists.txt (not in
# the runtime-only configuration: compiling needs MLIR).
if(TARGET attnc_capi)
  add_executable(attnc-capi-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/CApiTest.cpp)
  target_link_libraries(attnc-capi-tests PRIVATE attnc_capi GTest::gtest_main)
  target_compile_options(attnc-capi-tests PRIVATE -Wall -Wextra)
  # attnc_load's tests compile their artifacts with the command line.
  target_compile_definitions(attnc-capi-tests PRIVATE ATTNC_CLI="$<TARGET_FILE:attnc>")
  add_dependencies(attnc-capi-tests attnc)
  gtest_discover_tests(attnc-capi-tests DISCOVERY_MODE PRE_TEST PROPERTIES TIMEOUT 300)
endif()

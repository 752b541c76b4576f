# cuBLAS loaded at run time (runtime/Cublas.h): the row-major GEMM mapping
# checked on the host, the loader's errors, precision names; a real GEMM
# where a GPU is present (skipped here). Included from test/CMakeLists.txt;
# needs no MLIR and no GPU.
add_executable(attnc-cublas-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/CublasTest.cpp)
target_include_directories(attnc-cublas-tests PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(attnc-cublas-tests PRIVATE AttncRuntime GTest::gtest_main)
target_compile_options(attnc-cublas-tests PRIVATE -Wall -Wextra)
gtest_discover_tests(attnc-cublas-tests DISCOVERY_MODE PRE_TEST)

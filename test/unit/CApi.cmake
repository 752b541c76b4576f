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

  # attnc.h's thread-safety contract: eight threads of compile, forward and
  # backward on shared and own handles, equal to the serial run
  # (scripts/tsan.sh runs it under ThreadSanitizer).
  find_package(Threads REQUIRED)
  add_executable(attnc-capi-threads-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/CApiThreadsTest.cpp)
  target_link_libraries(attnc-capi-threads-tests PRIVATE attnc_capi GTest::gtest_main Threads::Threads)
  target_compile_options(attnc-capi-threads-tests PRIVATE -Wall -Wextra)
  gtest_discover_tests(attnc-capi-threads-tests DISCOVERY_MODE PRE_TEST PROPERTIES TIMEOUT 600)

  # The CUDA calls on a recording libcuda.so.1 (CudaCallerState.cmake's
  # fake): the caller's context, stream and no host waits, without a GPU.
  add_executable(attnc-capi-fake-gpu-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/CApiFakeGpuTest.cpp)
  target_include_directories(attnc-capi-fake-gpu-tests PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(attnc-capi-fake-gpu-tests PRIVATE attnc_capi GTest::gtest_main ${CMAKE_DL_LIBS})
  target_compile_options(attnc-capi-fake-gpu-tests PRIVATE -Wall -Wextra)
  add_dependencies(attnc-capi-fake-gpu-tests attnc-fake-cuda)
  gtest_discover_tests(attnc-capi-fake-gpu-tests DISCOVERY_MODE PRE_TEST
    PROPERTIES ENVIRONMENT "LD_LIBRARY_PATH=${ATTNC_FAKE_CUDA_DIR}" TIMEOUT 600)
endif()

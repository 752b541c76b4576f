# Runtime JIT tests: SHA-256, the kernel cache, NVRTC to CUBIN, the host
# compiler and the CUDA driver loader. They need no GPU and no MLIR; the
# driver tests check the "no driver" path here and launch kernels where a
# GPU is present.
add_executable(attnc-runtime-jit-tests unit/RuntimeJitTest.cpp)
target_link_libraries(attnc-runtime-jit-tests PRIVATE AttncRuntime GTest::gtest_main)
# Scratch space inside the build tree: the tests never touch the user's
# real kernel cache.
target_compile_definitions(attnc-runtime-jit-tests PRIVATE
  ATTNC_TEST_SCRATCH_DIR="${CMAKE_CURRENT_BINARY_DIR}/runtime-jit-scratch")
gtest_discover_tests(attnc-runtime-jit-tests DISCOVERY_MODE PRE_TEST
  PROPERTIES ENVIRONMENT "ATTNC_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/runtime-jit-scratch/default-cache")

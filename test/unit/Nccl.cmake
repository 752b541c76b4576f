# NCCL loaded at run time (runtime/dist/Nccl.h): the restated API against
# the toolkit's nccl.h when the build finds one, the loader, a unique id
# without a GPU; one-rank collectives where a GPU is present (the device
# script runs them). Included from test/CMakeLists.txt; needs no MLIR.
add_executable(attnc-nccl-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/NcclTest.cpp)
target_include_directories(attnc-nccl-tests PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(attnc-nccl-tests PRIVATE AttncDist GTest::gtest_main)
target_compile_options(attnc-nccl-tests PRIVATE -Wall -Wextra)
find_path(ATTNC_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
if(ATTNC_NCCL_INCLUDE_DIR)
  target_include_directories(attnc-nccl-tests SYSTEM PRIVATE ${ATTNC_NCCL_INCLUDE_DIR})
  target_compile_definitions(attnc-nccl-tests PRIVATE ATTNC_HAVE_NCCL_H=1)
endif()
gtest_discover_tests(attnc-nccl-tests DISCOVERY_MODE PRE_TEST PROPERTIES TIMEOUT 120)

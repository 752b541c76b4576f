# CPU LSH attention kernels (codegen/kernels/cpu/attnc/lsh.h) against a double
# reference. Included from test/CMakeLists.txt; needs no MLIR and no GPU.
#
#   attnc-cpu-lsh-tests   OpenMP, -O3 (-march=native where available), the
#                         code generation of the runtime's compiled kernels
find_package(OpenMP)

include(CheckCXXCompilerFlag)
check_cxx_compiler_flag(-march=native ATTNC_HAVE_MARCH_NATIVE)

add_executable(attnc-cpu-lsh-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/CpuLshTest.cpp)
target_include_directories(attnc-cpu-lsh-tests PRIVATE ${PROJECT_SOURCE_DIR}
                           ${PROJECT_SOURCE_DIR}/codegen/kernels/common ${PROJECT_SOURCE_DIR}/codegen/kernels/cpu)
target_link_libraries(attnc-cpu-lsh-tests PRIVATE GTest::gtest_main)
target_compile_options(attnc-cpu-lsh-tests PRIVATE -O3 -Wall -Wextra)
if(ATTNC_HAVE_MARCH_NATIVE)
  target_compile_options(attnc-cpu-lsh-tests PRIVATE -march=native)
endif()
if(OpenMP_CXX_FOUND)
  target_link_libraries(attnc-cpu-lsh-tests PRIVATE OpenMP::OpenMP_CXX)
endif()
gtest_discover_tests(attnc-cpu-lsh-tests DISCOVERY_MODE PRE_TEST
                     PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2")

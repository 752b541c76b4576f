# CPU attention kernels (codegen/kernels/cpu/attnc/) against a double
# reference. Included from test/CMakeLists.txt; needs no MLIR and no GPU.
#
#   attnc-cpu-kernel-tests           OpenMP + (if found) OpenBLAS, full grid
#   attnc-cpu-kernel-tests-portable  no OpenMP, no CBLAS, portable GEMM
#                                    (ATTNC_CPU_PORTABLE): the same file on a
#                                    smaller grid, built along with the first
#                                    so that `ctest -R Cpu` finds both
find_package(OpenMP)
find_package(OpenBLAS CONFIG QUIET)

include(CheckCXXCompilerFlag)
check_cxx_compiler_flag(-march=native ATTNC_HAVE_MARCH_NATIVE)

function(attnc_cpu_kernel_test name)
  cmake_parse_arguments(ARG "OPENMP;CBLAS;PORTABLE;REDUCED" "PREFIX" "" ${ARGN})
  add_executable(${name} ${CMAKE_CURRENT_SOURCE_DIR}/unit/CpuKernelsTest.cpp)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}
                             ${PROJECT_SOURCE_DIR}/codegen/kernels/common ${PROJECT_SOURCE_DIR}/codegen/kernels/cpu)
  target_link_libraries(${name} PRIVATE GTest::gtest_main)
  # The runtime compiles generated kernels with -O3 -march=native; test the
  # same code generation (vectorised paths included) in every build type.
  target_compile_options(${name} PRIVATE -O3 -Wall -Wextra)
  if(ATTNC_HAVE_MARCH_NATIVE)
    target_compile_options(${name} PRIVATE -march=native)
  endif()
  if(ARG_OPENMP AND OpenMP_CXX_FOUND)
    target_link_libraries(${name} PRIVATE OpenMP::OpenMP_CXX)
  endif()
  if(ARG_CBLAS AND OpenBLAS_FOUND)
    target_compile_definitions(${name} PRIVATE ATTNC_USE_CBLAS)
    target_include_directories(${name} PRIVATE ${OpenBLAS_INCLUDE_DIRS})
    target_link_libraries(${name} PRIVATE ${OpenBLAS_LIBRARIES})
  endif()
  if(ARG_PORTABLE)
    target_compile_definitions(${name} PRIVATE ATTNC_CPU_PORTABLE)
  endif()
  if(ARG_REDUCED)
    target_compile_definitions(${name} PRIVATE ATTNC_TEST_REDUCED_GRID)
  endif()
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST TEST_PREFIX "${ARG_PREFIX}"
                       PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;OPENBLAS_NUM_THREADS=2")
endfunction()

attnc_cpu_kernel_test(attnc-cpu-kernel-tests OPENMP CBLAS)
attnc_cpu_kernel_test(attnc-cpu-kernel-tests-portable PORTABLE REDUCED PREFIX "Portable.")
add_dependencies(attnc-cpu-kernel-tests attnc-cpu-kernel-tests-portable)

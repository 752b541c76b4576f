# The whole-model reference's layers (test/reference/Layers.h), the training
# runtime's GEMMs (runtime/train/Gemm.h) and its cross-entropy against
# double references. Included from test/CMakeLists.txt; needs no MLIR and no
# GPU. The test compiles the three sources itself (same flags as
# AttncTrain), so it does not depend on the rest of the training library.
#
#   attnc-train-layers-tests           OpenMP + (if found) OpenBLAS, as the
#                                      AttncTrain library builds it
#   attnc-train-layers-tests-portable  OpenMP, no CBLAS: the loop GEMM on
#                                      every path
find_package(OpenMP)
find_package(OpenBLAS CONFIG QUIET)

function(attnc_train_layers_test name)
  cmake_parse_arguments(ARG "CBLAS" "PREFIX" "" ${ARGN})
  add_executable(${name} ${CMAKE_CURRENT_SOURCE_DIR}/unit/TrainLayersTest.cpp
                 ${PROJECT_SOURCE_DIR}/test/reference/Layers.cpp
                 ${PROJECT_SOURCE_DIR}/runtime/train/Gemm.cpp
                 ${PROJECT_SOURCE_DIR}/runtime/train/CrossEntropy.cpp)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE GTest::gtest_main)
  target_compile_options(${name} PRIVATE -O3 -Wall -Wextra)
  if(OpenMP_CXX_FOUND)
    target_link_libraries(${name} PRIVATE OpenMP::OpenMP_CXX)
  endif()
  if(ARG_CBLAS AND OpenBLAS_FOUND)
    target_compile_definitions(${name} PRIVATE ATTNC_TRAIN_HAVE_CBLAS=1)
    target_include_directories(${name} PRIVATE ${OpenBLAS_INCLUDE_DIRS})
    target_link_libraries(${name} PRIVATE ${OpenBLAS_LIBRARIES})
  endif()
  # OpenBLAS's results depend on its own thread count (Gemm.cpp): pin it.
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST TEST_PREFIX "${ARG_PREFIX}"
                       PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;OPENBLAS_NUM_THREADS=1")
endfunction()

attnc_train_layers_test(attnc-train-layers-tests CBLAS)
attnc_train_layers_test(attnc-train-layers-tests-portable PREFIX "portable.")

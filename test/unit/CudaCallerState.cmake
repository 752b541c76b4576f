# The GPU device's manners toward its caller (runtime/KernelDevice.cpp):
# run against FakeCudaDriver.cpp, a libcuda.so.1 that records every call,
# found first through LD_LIBRARY_PATH. Included from test/CMakeLists.txt;
# needs no MLIR and no GPU.
add_library(attnc-fake-cuda SHARED ${CMAKE_CURRENT_SOURCE_DIR}/unit/FakeCudaDriver.cpp)
target_include_directories(attnc-fake-cuda PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
set(ATTNC_FAKE_CUDA_DIR ${CMAKE_BINARY_DIR}/fake-cuda)
set_target_properties(attnc-fake-cuda PROPERTIES OUTPUT_NAME cuda SOVERSION 1
  LIBRARY_OUTPUT_DIRECTORY ${ATTNC_FAKE_CUDA_DIR})

add_executable(attnc-cuda-caller-state-tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/CudaCallerStateTest.cpp)
target_link_libraries(attnc-cuda-caller-state-tests PRIVATE AttncRuntime GTest::gtest_main ${CMAKE_DL_LIBS})
target_compile_options(attnc-cuda-caller-state-tests PRIVATE -Wall -Wextra)
add_dependencies(attnc-cuda-caller-state-tests attnc-fake-cuda)
gtest_discover_tests(attnc-cuda-caller-state-tests DISCOVERY_MODE PRE_TEST
  PROPERTIES ENVIRONMENT "LD_LIBRARY_PATH=${ATTNC_FAKE_CUDA_DIR}" TIMEOUT 120)

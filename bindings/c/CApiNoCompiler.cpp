//===- CApiNoCompiler.cpp - attnc_compile in a runtime-only build --------===//
//
// A libattnc built without MLIR (ATTNC_RUNTIME_ONLY, as on a GPU machine
// that has only CUDA and the runtime) cannot compile a spec. It runs
// artifacts compiled elsewhere instead (attnc_load); attnc_compile says so.
//
//===----------------------------------------------------------------------===//
#include "CApiInternal.h"

extern "C" attnc_error *attnc_compile(const char *, const char *, const attnc_compile_options *,
                                      attnc_variant **variant) {
  if (variant)
    *variant = nullptr;
  return attnc::capi::fail("attnc_compile: this libattnc was built without the compiler "
                           "(ATTNC_RUNTIME_ONLY); compile with `attnc compile SPEC -o DIR` "
                           "elsewhere and load DIR with attnc_load");
}

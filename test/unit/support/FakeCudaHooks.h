//===- FakeCudaHooks.h - FakeCudaDriver.cpp's test hooks --------*- C++ -*-===//
//
// The recording driver's hooks (its log, clearing it, marking a stream as
// captured), resolved from the libcuda.so.1 the process has loaded: the
// same library the runtime dlopened, so one log holds every call.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_TEST_UNIT_FAKECUDAHOOKS_H
#define ATTNC_TEST_UNIT_FAKECUDAHOOKS_H

#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace attnc::test {

struct FakeCudaHooks {
  void *lib = nullptr;
  const char *(*log)() = nullptr;
  void (*clearLog)() = nullptr;
  void (*setCapturing)(CUstream, int) = nullptr;

  /// False when libcuda.so.1 cannot be loaded or is not the fake.
  bool load() {
    lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    return lib && symbol(log, "attnc_fake_log") && symbol(clearLog, "attnc_fake_clear_log") &&
           symbol(setCapturing, "attnc_fake_set_capturing");
  }
  /// `fn` = the library's `name` (a hook or a CUDA entry point).
  template <typename Fn> bool symbol(Fn &fn, const char *name) {
    fn = reinterpret_cast<Fn>(::dlsym(lib, name));
    return fn != nullptr;
  }
  /// The log's lines: "NAME ctx=C[ stream=S]", oldest first.
  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    std::istringstream in(log());
    for (std::string l; std::getline(in, l);)
      out.push_back(l);
    return out;
  }
};

/// A pointer as the log prints it.
inline std::string ptrStr(const void *p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

} // namespace attnc::test

#endif // ATTNC_TEST_UNIT_FAKECUDAHOOKS_H

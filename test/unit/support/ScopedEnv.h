//===- ScopedEnv.h - An environment variable set for one scope --*- C++ -*-===//
#ifndef ATTNC_TEST_UNIT_SUPPORT_SCOPEDENV_H
#define ATTNC_TEST_UNIT_SUPPORT_SCOPEDENV_H

#include <cstdlib>
#include <string>

namespace attnc::test {

/// Sets (or, with a null value, unsets) an environment variable until the
/// scope ends, then restores it.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old;
    had_ = std::getenv(name) != nullptr;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_.c_str(), old_.c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }

private:
  std::string name_, old_;
  bool had_ = false;
};

} // namespace attnc::test

#endif // ATTNC_TEST_UNIT_SUPPORT_SCOPEDENV_H

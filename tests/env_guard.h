// An environment variable set for the length of a scope: the tests of the switches the plan
// reads at every call (DECODEBENCH_TILES, DECODEBENCH_MIXED_GEMM, ...).
#pragma once

#include <cstdlib>
#include <string>

namespace dbtest {

// `name` set to `value` (null: unset) while the guard lives, as it was afterwards.
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    if (const char* v = std::getenv(name_)) had_ = true, old_ = v;
    set(value);
  }
  ~EnvGuard() { set(had_ ? old_.c_str() : nullptr); }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  void set(const char* v) {
    if (v)
      setenv(name_, v, 1);
    else
      unsetenv(name_);
  }
  const char* name_;
  bool had_ = false;
  std::string old_;
};

}  // namespace dbtest

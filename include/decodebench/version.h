// What the binary is: its version, the git commit it was built from and its build type,
// recorded at build time (scripts/version.cmake); every result carries them.
#pragma once

#include <string>

namespace db {

std::string version_number();  // "0.2.0"
std::string git_commit();  // the commit, "-dirty" after it when the tree had changes; "unknown" without git
std::string build_type();  // CMAKE_BUILD_TYPE

// "0.2.0 (abc1234def56)"
inline std::string version_string() {
  return version_number() + " (" + git_commit() + ")";
}

}  // namespace db

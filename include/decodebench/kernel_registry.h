// The GEMV kernels a run can select, by name. The host side (this table) exists in every
// build so `decodebench list kernels` and the byte accounting work without CUDA; the
// device launchers are looked up by the same names in the CUDA backend.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "decodebench/accounting.h"
#include "decodebench/config.h"

namespace db {

struct KernelInfo {
  std::string name;  // "<scheme>.<variant>", e.g. "int4.gemv"
  Scheme scheme;
  bool is_default;        // the one --kernel auto picks for its scheme
  std::string summary;    // one line for `list kernels`
  KernelTraffic traffic;  // bytes moved beyond the scheme's minimum
};

const std::vector<KernelInfo>& kernel_registry();

// "auto" resolves to the scheme's default; a name of another scheme, or an unknown name,
// is a db::UsageError listing the kernels of `scheme`.
const KernelInfo& resolve_kernel(std::string_view name, Scheme scheme);

}  // namespace db

// The GEMV kernels a run can select, by name. The host side (this table) exists in every
// build so `decodebench list kernels`, the byte accounting and the linear plan
// (decodebench/linear_plan.h) work without CUDA; each entry names its implementation, which the
// plan assigns to the matrices and the CUDA engine launches.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "decodebench/accounting.h"
#include "decodebench/config.h"

namespace db {

// How a linear is multiplied at batch 1.
enum class LinearImpl {
  gemv_fast,       // the rows kernel (kernels/gemv.cu): x in registers, the fast path
  gemv_naive,      // one weight at a time from the canonical layout: the slow path
  cublas,          // cublasGemmEx with n = 1 on fp16 weights
  dequant_cublas,  // an fp16 copy of the matrix, then cublasGemmEx
};
const char* to_string(LinearImpl i);  // "gemv-fast", "gemv-naive", "cublas", "dequant-cublas"
bool runs_cublas(LinearImpl i);       // cublas and dequant_cublas

struct KernelInfo {
  std::string name;  // "<scheme>.<variant>", e.g. "int4.gemv"
  Scheme scheme;
  LinearImpl impl;
  bool is_default;        // the one --kernel auto picks for its scheme
  std::string summary;    // one line for `list kernels`
  KernelTraffic traffic;  // bytes moved beyond the scheme's minimum
};

const std::vector<KernelInfo>& kernel_registry();

// "auto" resolves to the scheme's default; a name of another scheme, or an unknown name,
// is a db::UsageError listing the kernels of `scheme`.
const KernelInfo& resolve_kernel(std::string_view name, Scheme scheme);

}  // namespace db

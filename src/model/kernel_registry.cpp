// The kernel table (see include/decodebench/kernel_registry.h).
#include "decodebench/kernel_registry.h"

#include <fmt/format.h>

#include "decodebench/error.h"

namespace db {

const std::vector<KernelInfo>& kernel_registry() {
  // dequant-cublas writes an fp16 copy of each weight (2 bytes) and cuBLAS reads it back (2).
  static const std::vector<KernelInfo> table = {
      {"fp16.gemv",
       Scheme::fp16,
       LinearImpl::gemv_fast,
       true,
       "x in registers, 2 rows per group, 16-byte loads, half2 dot per chunk, fp32 sum",
       {}},
      {"fp16.cublas",
       Scheme::fp16,
       LinearImpl::cublas,
       false,
       "cublasGemmEx with n=1 (cuBLAS picks its own GEMV)",
       {}},
      {"int8.gemv",
       Scheme::int8,
       LinearImpl::gemv_fast,
       true,
       "x in registers, 4 rows per group (2 on long rows), 16-byte loads, int8->fp16 by byte permute + one "
       "subtract",
       {}},
      {"int8.naive",
       Scheme::int8,
       LinearImpl::gemv_naive,
       false,
       "one weight at a time: load byte, convert, multiply (slow path)",
       {}},
      {"int8.dequant-cublas",
       Scheme::int8,
       LinearImpl::dequant_cublas,
       false,
       "dequantize to an fp16 scratch matrix, then cuBLAS (the 'fast kernel not used' case)",
       {4.0}},
      {"int4.gemv",
       Scheme::int4,
       LinearImpl::gemv_fast,
       true,
       "x in registers, 8 rows per group (4 rows x 2 chunks a thread on long rows), repacked nibbles, "
       "scales and zero points packed per 8 rows, lop3-style unpack to half2, 16-byte loads; on matrices of "
       ">= 2e8 weights the dot runs on the tensor cores (mma.m16n8k16 from a fragment-ordered layout)",
       {}},
      {"int4.naive",
       Scheme::int4,
       LinearImpl::gemv_naive,
       false,
       "shift/mask/convert per element from the canonical layout (slow path)",
       {}},
      {"int4.dequant-cublas",
       Scheme::int4,
       LinearImpl::dequant_cublas,
       false,
       "dequantize to an fp16 scratch matrix, then cuBLAS (the 'fast kernel not used' case)",
       {4.0}},
      {"fp8.gemv",
       Scheme::fp8,
       LinearImpl::gemv_fast,
       true,
       "x in registers, 4 rows per group (2 on long rows), 16-byte loads, E4M3 pairs -> half2 by the fp8 "
       "cvt of sm_89 and later, fp32 row scale",
       {}},
      {"fp8.naive",
       Scheme::fp8,
       LinearImpl::gemv_naive,
       false,
       "one weight at a time: load byte, convert, multiply (slow path; any GPU)",
       {}},
      {"fp8.dequant-cublas",
       Scheme::fp8,
       LinearImpl::dequant_cublas,
       false,
       "dequantize to an fp16 scratch matrix, then cuBLAS (the 'fast kernel not used' case)",
       {4.0}},
  };
  return table;
}

const char* to_string(LinearImpl i) {
  switch (i) {
    case LinearImpl::gemv_fast:
      return "gemv-fast";
    case LinearImpl::gemv_naive:
      return "gemv-naive";
    case LinearImpl::cublas:
      return "cublas";
    case LinearImpl::dequant_cublas:
      return "dequant-cublas";
  }
  return "?";
}

bool runs_cublas(LinearImpl i) {
  return i == LinearImpl::cublas || i == LinearImpl::dequant_cublas;
}

const KernelInfo& resolve_kernel(std::string_view name, Scheme scheme) {
  std::string names;
  for (const KernelInfo& k : kernel_registry()) {
    if (k.scheme != scheme) continue;
    if ((name == "auto" && k.is_default) || name == k.name) return k;
    names += names.empty() ? k.name : ", " + k.name;
  }
  usage_fail("--kernel {}: not a kernel for {} weights (choose auto, {})", name, to_string(scheme), names);
}

}  // namespace db

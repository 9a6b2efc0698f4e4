// How much of each SM's unified L1 / shared memory a kernel launch asks to be shared memory
// (kernels/pdl.cuh passes it as cudaLaunchAttributePreferredSharedMemoryCarveout). Host-only
// arithmetic, kept apart from the launch so that the CPU tests check it.
//
// The attribute is a percentage of the SM's largest shared-memory configuration (228 KB on
// Hopper); the driver rounds it up to a configuration the SM supports (on the H200 0, 8, 16,
// 32, 64, 100, 132, 164, 196 or 228 KB; the rest of 256 KB is L1) and, being a preference,
// gives a launch more when its blocks need more. An SM changes configuration only once its
// blocks have drained.
//
// Left to the driver, a kernel whose occupancy shared memory bounds gets a large
// configuration: attention runs at 164 KB (L1 92 KB), and the GEMVs after it, whose blocks
// share x's lines in L1, then start on SMs in that split. Asked
// per launch for the shared memory of the blocks the SM will hold, and no less than
// kMinCarveoutPercent, 8b-int8 decodes 4% faster and no model slower.
#pragma once

#include <algorithm>
#include <cstdint>

namespace db {

// 14% of 228 KB is 31.9 KB, which rounds up to the H200's 32 KB configuration (224 KB of L1).
// Measured on H200 with this rule, a floor of 14 against 7 (16 KB)
// and 0 (only what the resident blocks need): 8b-fp16 3.772 / 3.773 / 3.845 ms, 8b-int8
// 2.215 / 2.215 / 2.236, 8b-int4 1.756 / 1.771 / 1.771, 1b-fp16 0.775 / 0.775 / 0.795.
constexpr int kMinCarveoutPercent = 14;

// The blocks of a launch that one SM holds at once: all it can (`occupancy`, by registers,
// threads and shared memory), or fewer where the grid is smaller than a full wave.
inline int64_t resident_blocks(int64_t grid_blocks, int sms, int occupancy) {
  const int64_t per_sm = (grid_blocks + sms - 1) / std::max(sms, 1);
  return std::max<int64_t>(1, std::min<int64_t>(per_sm, occupancy));
}

// The carveout, in percent, that holds `blocks` blocks of `block_bytes` of shared memory each
// (static + dynamic + the per-block reservation, cudaDevAttrReservedSharedMemoryPerBlock) on
// an SM whose largest configuration is `max_sm_bytes`: rounded up, at least
// kMinCarveoutPercent, at most 100.
inline int carveout_percent(int64_t blocks, int64_t block_bytes, int64_t max_sm_bytes) {
  if (max_sm_bytes <= 0) return 100;
  const int64_t need = blocks * block_bytes;
  const int64_t pct = (need * 100 + max_sm_bytes - 1) / max_sm_bytes;
  return static_cast<int>(std::clamp<int64_t>(pct, kMinCarveoutPercent, 100));
}

}  // namespace db

// RMSNorm (qwen3's q/k norm) and RoPE of one head vector held by one warp, shared by the decode
// attention kernels (attention_kernels.cuh, attention_mma.cu).
#pragma once

#include "common.cuh"

namespace db::cuda {

// One head vector (q or the new k) handled by one warp: lane l holds elements l*E..l*E+E-1,
// so RoPE's partner i + HD/2 sits in lane l ^ 16. RMSNorm (qwen3) with a warp reduction,
// then HF's rotate_half: out[i] = v[i] cos - v[i+h] sin, out[i+h] = v[i+h] cos + v[i] sin.
template <int HD>
__device__ __forceinline__ void norm_rope_warp(float (&v)[HD / kWarp], const float (&norm_w)[HD / kWarp],
                                               bool has_norm, float eps, const float (&cosv)[HD / kWarp],
                                               const float (&sinv)[HD / kWarp], int lane) {
  constexpr int E = HD / kWarp;
  if (has_norm) {
    float ss = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) ss += v[e] * v[e];
    const float inv = rsqrtf(warp_sum(ss) / HD + eps);
#pragma unroll
    for (int e = 0; e < E; ++e) v[e] = v[e] * inv * norm_w[e];
  }
  const bool upper = lane >= kWarp / 2;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const float partner = __shfl_xor_sync(0xffffffffu, v[e], kWarp / 2);
    v[e] = upper ? v[e] * cosv[e] + partner * sinv[e] : v[e] * cosv[e] - partner * sinv[e];
  }
}

// A lane's operands of norm_rope_warp for a head vector of the position whose RoPE table rows
// are cosp and sinp (HD / 2 each): its elements' cos and sin (lane l and l ^ 16 share them),
// and the q and k norm weights (1 where the model has none).
template <int HD>
__device__ __forceinline__ void lane_rope_operands(const float* cosp, const float* sinp, const __half* q_norm,
                                                   const __half* k_norm, int lane, float (&cosv)[HD / kWarp],
                                                   float (&sinv)[HD / kWarp], float (&qn)[HD / kWarp],
                                                   float (&kn)[HD / kWarp]) {
  constexpr int E = HD / kWarp;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int i = lane * E + e, j = i - (lane >= kWarp / 2 ? HD / 2 : 0);
    cosv[e] = cosp[j];
    sinv[e] = sinp[j];
    qn[e] = q_norm ? __half2float(q_norm[i]) : 1.f;
    kn[e] = k_norm ? __half2float(k_norm[i]) : 1.f;
  }
}

}  // namespace db::cuda

// Decode attention (see attention.cuh): the public entry points. The kernels and their launchers
// are in attention_kernels.cuh, instantiated one KV cache scheme a file (attention_fp16.cu,
// attention_fp8.cu, attention_int8.cu).
#include "attention_kernels.cuh"

namespace db::cuda {

int attention_splits(int64_t positions) {
  return static_cast<int>((positions + kAttentionChunk - 1) / kAttentionChunk);
}

bool attention_fast_path(int head_dim, int heads, int kv_heads) {
  const bool hd = head_dim == 32 || head_dim == 64 || head_dim == 96 || head_dim == 128;
  return hd && heads % kv_heads == 0 && heads / kv_heads <= kMaxGroup;
}

void attention(const AttentionArgs& a, cudaStream_t s, int batch, KvScheme kv) {
  if (a.kv_heads <= 0 || a.heads % a.kv_heads != 0)
    fail("attention: {} query heads are not a multiple of {} kv heads", a.heads, a.kv_heads);
  if (batch < 1 || batch > 65535) fail("attention: a batch of {} sequences (1 to 65535)", batch);
  switch (kv) {
    case KvScheme::fp16:
      return attention_launch_fp16(a, s, batch);
    case KvScheme::fp8:
      return attention_launch_fp8(a, s, batch);
    case KvScheme::int8:
      return attention_launch_int8(a, s, batch);
  }
  fail("attention: an unknown KV cache scheme");
}

}  // namespace db::cuda

// The decode attention kernels (attention_kernels.cuh) for an int8 KV cache at batch 1, a
// translation unit of their own so that the instances compile in parallel.
#include "attention_kernels.cuh"

namespace db::cuda {

void attention_launch_int8(const AttentionArgs& a, cudaStream_t s) {
  launch_batch<false, KvScheme::int8>(a, s, 1);
}

}  // namespace db::cuda

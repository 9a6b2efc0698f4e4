// The decode attention kernels (attention_kernels.cuh) for an int8 KV cache at a batch of more
// than one sequence, a translation unit of their own so that the instances compile in parallel.
#include "attention_kernels.cuh"

namespace db::cuda {

void attention_launch_int8_batch(const AttentionArgs& a, cudaStream_t s, int batch) {
  launch_batch<true, KvScheme::int8>(a, s, batch);
}

}  // namespace db::cuda

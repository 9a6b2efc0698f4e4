// The decode attention kernels (attention_kernels.cuh) for an fp16 KV cache, a translation unit of
// their own so that the three schemes' instances compile in parallel.
#include "attention_kernels.cuh"

namespace db::cuda {

void attention_launch_fp16(const AttentionArgs& a, cudaStream_t s, int batch) {
  launch_scheme<KvScheme::fp16>(a, s, batch);
}

}  // namespace db::cuda

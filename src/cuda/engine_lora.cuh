// The CUDA engine's LoRA part (include/decodebench/adapter.h): merging a merged adapter into
// the weights while they load, and the device state of an external one. The kernels are in
// kernels/lora.cuh (shrink, expand) and kernels/weights.cuh (quantize_merged).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "decodebench/adapter.h"
#include "engine.cuh"
#include "lora.cuh"
#include "weights.cuh"

namespace db::cuda {

// External-mode adapter state of one engine: the weights' groups (one per layer and site, all
// A and B in one allocation of DeviceWeights) pointed at the scratch every group shares (groups
// run one after another in stream order, and each delta is consumed by its GEMV before the
// next group writes).
struct Engine::Lora {
  __half* xnorm = nullptr;                       // [hidden]: the q/k/v and gate/up groups' input
  std::vector<std::array<LoraGroup, 4>> groups;  // [layer][LoraSite]; targets 0: not adapted there
};

// Device memory an adapter takes, for the memory plans.
struct LoraBytes {
  uint64_t weights = 0;  // external: A and B of every layer, fp16 (DeviceWeights)
  uint64_t scratch = 0;  // external: the normalized input, t and delta (each engine)
  uint64_t load = 0;     // merged: the temporary matrix and A, B, while loading only (DeviceWeights)
};
LoraBytes lora_bytes(const WeightSource& ws);
// The `scratch` part for an external adapter of rank `rank` (0: none).
uint64_t lora_scratch_bytes(const ModelConfig& c, int64_t rank);
// The rank of the source's adapter in external mode; 0 without one or merged.
int64_t external_lora_rank(const WeightSource& ws);

// External mode: every (layer, site) group's A and B uploaded into one allocation made with
// `alloc` (owned by the caller), on stream `s`, and the groups pointing into it; their x, t
// and delta are left null for each engine to set. Empty without an external adapter.
std::vector<std::array<LoraGroup, 4>> upload_external_lora(const WeightSource& ws,
                                                           const std::function<void*(size_t)>& alloc,
                                                           cudaStream_t s);

// A GEMV output with an addend: an external adapter's delta (or nullptr: none).
inline GemvOutput with_addend(GemvOutput out, const float* addend) {
  out.addend = addend;
  return out;
}

// Merges a merged adapter into the linears it targets while they load. A targeted linear's
// base weight is first produced into a temporary matrix (`fill_base`, the engine's own
// weight path): fp16 for synthetic and dense origins, which holds exactly their fp16-rounded
// values, or a decodebench file's own int8/int4 layout for quantized ones. quantize_merged then
// writes W + s B A, quantized in the model's scheme, into the linear's rows of `dst`. The
// temporary matrix and A, B live as long as the merger.
class LoraMerger {
 public:
  LoraMerger(const WeightSource& ws, cudaStream_t s);  // does nothing without a merged adapter
  bool merges(const Origin& o) const;
  void merge(const Origin& o, const DeviceMatrix& dst, RowMap map,
             const std::function<void(const DeviceMatrix& base)>& fill_base);
  static uint64_t load_bytes(const WeightSource& ws);  // device memory it takes (0: none)

 private:
  struct CudaFree {
    void operator()(void* p) const { cudaFree(p); }
  };
  using DevicePtr = std::unique_ptr<void, CudaFree>;

  cudaStream_t s_;
  const Adapter* adapter_ = nullptr;
  DevicePtr base_, a_, b_;  // the temporary matrix, A [rank, cols] and B [rows, rank] (fp16)
  std::vector<uint16_t> host_a_, host_b_;
};

}  // namespace db::cuda

// The CUDA engine's step at --batch B > 1 (Engine::enqueue_step_batch): B sequences in
// lockstep, one row each, through the prefill's row-wise kernels (embed_rows, rmsnorm_rows,
// silu_mul_interleaved) and one GEMM a linear over all B rows, so each weight is read once a
// step (the naive kernel excepted: it reads them once a sequence). Attention is the decode
// kernel with one grid z index a sequence. The columns GEMV, the skinny GEMM and RMSNorm are
// launched with PDL (their launch and first weight loads start under the kernel before); the
// other launches start after their predecessor has completed. Each linear takes the batched
// path the linear plan gives its kind (the mixed-input GEMM on sm_90 from kMixedGemmMinBatch to
// kMixedGemmMaxBatch); the skinny GEMM's and the tiles GEMV's shape for each kind is timed at
// construction (tune_batched_shapes) and written into the plan. A quantized matrix that runs
// cuBLAS on its fp16 copy makes the copy in blocks of rows (gemm_rows_dequant; the whole matrix
// by default, LinearPlan::dequant_chunk_bytes), each block's GEMM right after it.
#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <string>

#include "attention.cuh"
#include "common.cuh"
#include "engine.cuh"
#include "engine_buffers.cuh"
#include "gemv_columns.cuh"
#include "gemv_tiles.cuh"
#include "mixed_gemm.cuh"
#include "prefill.cuh"
#include "skinny.cuh"
#include "step.cuh"
#include "weights.cuh"

namespace db::cuda {

void Engine::linear_rows(int64_t layer, LoraSite site, const LinearOp& op, const __half* x, float* y,
                         bool accumulate) {
  Buffers& b = *buf_;
  const int64_t B = batch_, rows = op.m.rows, cols = op.m.cols;
  const LinearChoice& l = plan_[op.kind];
  switch (l.batched) {
    case BatchedPath::tiles_gemv:
      gemv_tiles_shaped(op.m, x, B, y, accumulate, l.tiles ? l.tiles->shape : TilesShape{}, stream_);
      break;
    case BatchedPath::gemv_columns:
      gemv_columns(op.m, x, B, y, accumulate, stream_);
      break;
    case BatchedPath::skinny_gemm:
      gemm_skinny_tuned(op.m, x, B, y, accumulate, b.skinny_workspace,
                        l.skinny ? l.skinny->shape : SkinnyShape{}, stream_);
      break;
    case BatchedPath::mixed_gemm:
      gemm_mixed(op.m, x, B, y, accumulate, b.mixed_workspace, stream_);
      break;
    case BatchedPath::cublas:
      gemm_rows(cublas_, static_cast<const __half*>(op.m.qweight), rows, cols, x, B, y, accumulate);
      break;
    case BatchedPath::fp16_copy_cublas:  // in blocks of rows: the whole matrix by default
      gemm_rows_dequant(cublas_, op.m, x, B, y, accumulate, b.dequant,
                        fp16_chunk_rows(rows, cols, plan_.dequant_chunk_bytes), stream_);
      break;
    case BatchedPath::dequant_cublas:
      dequantize_to_f16(op.m, b.dequant, stream_);
      gemm_rows(cublas_, b.dequant, rows, cols, x, B, y, accumulate);
      break;
    case BatchedPath::gemv_per_sequence:
      for (int64_t s = 0; s < B; ++s) {
        GemvOutput out{accumulate ? Epilogue::residual : Epilogue::store, y + s * rows, nullptr};
        if (accumulate) {
          out.y = nullptr;
          out.resid = y + s * rows;
        }
        gemv(op.m, GemvInput{x + s * cols}, out, GemvVariant::naive, stream_);
      }
      break;
    case BatchedPath::none:
      fail("{}: the plan has no batched path (batch {})", to_string(op.kind), plan_.batch);
  }
  if (weights_->lora_rank() == 0 || layer < 0) return;  // no external adapter, or the lm_head
  const LoraGroup& g = weights_->lora_groups()[layer][static_cast<int>(site)];
  if (g.targets > 0) lora_rows(cublas_, g, x, B, b.lora_rows, y, rows, stream_);
}

void Engine::tune_batched_shapes() {
  Buffers& b = *buf_;
  // The choices of this process, by device, path, matrix kind and shape, and the batch's group
  // of sequences (the skinny GEMM's groups of 8; the tiles GEMV's batch).
  static std::mutex mutex;
  static std::map<std::string, SkinnyTiming> skinny;
  static std::map<std::string, TilesTiming> tiles;
  // The step's output buffer for each kind.
  const std::array<float*, kMatrixKinds> outputs = {b.qkv, b.resid, b.gate_up, b.resid, b.logits};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const int64_t group = (std::min(batch_, kSkinnyMaxBatch) + 7) / 8;  // sequence groups of 8
  for (MatrixKind k : kAllMatrixKinds) {
    const BatchedPath path = plan_[k].batched;
    if (path != BatchedPath::skinny_gemm && path != BatchedPath::tiles_gemv) continue;
    std::vector<const DeviceMatrix*> ms;
    if (k == MatrixKind::lm_head) {
      ms.push_back(&lm_head_.m);
    } else {
      for (const DeviceLayer& d : layers_) {
        const LinearOp* ops[] = {&d.qkv, &d.o, &d.gate_up, &d.down};
        ms.push_back(&ops[static_cast<int>(k)]->m);
      }
    }
    const DeviceMatrix& m = *ms.front();
    const std::string key = fmt::format("{} {} {} {}x{} g{} z{}", device, to_string(k), to_string(m.scheme),
                                        m.rows, m.cols, m.group_size, m.zero_point ? 1 : 0);
    float* y = outputs[static_cast<int>(k)];
    std::lock_guard<std::mutex> lock(mutex);
    if (path == BatchedPath::skinny_gemm) {
      const std::string kb = fmt::format("{} {}", key, group);
      auto it = skinny.find(kb);
      if (it == skinny.end())
        it = skinny.emplace(kb, tune_skinny(ms, b.xnorm, batch_, y, b.skinny_workspace, stream_)).first;
      plan_[k].skinny = it->second;
    } else {
      const std::string kb = fmt::format("{} {}", key, batch_);
      auto it = tiles.find(kb);
      if (it == tiles.end()) it = tiles.emplace(kb, tune_tiles(ms, b.xnorm, batch_, y, stream_)).first;
      plan_[k].tiles = it->second;
    }
  }
}

void Engine::enqueue_step_batch() {
  Buffers& b = *buf_;
  const int64_t B = batch_, H = c_.hidden_size, I = c_.intermediate_size;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  embed_rows(embedding_, batch_state_.tokens, B, b.resid, stream_);
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    const DeviceLayer& d = layers_[l];
    rmsnorm_rows(b.resid, d.attn_norm, eps, B, H, b.xnorm, stream_);
    linear_rows(l, LoraSite::qkv, d.qkv, b.xnorm, b.qkv, false);

    // The O GEMM is a plain launch: no early launch to let in.
    enqueue_attention(attention_args(d, batch_state_.pos), static_cast<int>(B));

    linear_rows(l, LoraSite::o, d.o, b.attn, b.resid, true);
    rmsnorm_rows(b.resid, d.mlp_norm, eps, B, H, b.xnorm, stream_);
    linear_rows(l, LoraSite::gate_up, d.gate_up, b.xnorm, b.gate_up, false);
    silu_mul_interleaved(b.gate_up, B * I, b.act, stream_);  // rows are contiguous: one flat pass
    linear_rows(l, LoraSite::down, d.down, b.act, b.resid, true);
  }
  rmsnorm_rows(b.resid, final_norm_, eps, B, H, b.xnorm, stream_);
  linear_rows(-1, LoraSite::qkv, lm_head_, b.xnorm, b.logits, false);  // no adapter on the lm_head
  argmax_rows(b.logits, B, c_.vocab_size, batch_state_.keys, stream_);
  finish_step_batch(batch_state_, stream_);
}

}  // namespace db::cuda

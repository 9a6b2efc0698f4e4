// The CUDA engine's step at --batch B > 1 (Engine::enqueue_step_batch): B sequences in
// lockstep, one row each, through the prefill's row-wise kernels (embed_rows, rmsnorm_rows,
// silu_mul_interleaved) and one GEMM a linear over all B rows, so each weight is read once a
// step (the naive kernel excepted: it reads them once a sequence). Attention is the decode
// kernel with one grid z index a sequence. The skinny GEMM and RMSNorm are launched with PDL
// (their launch and first weight loads start under the kernel before); the other launches
// start after their predecessor has completed. The skinny GEMM's shape for each kind of
// matrix is timed at construction (tune_skinny_shapes).
#include <algorithm>
#include <map>
#include <mutex>
#include <string>

#include "attention.cuh"
#include "common.cuh"
#include "engine.cuh"
#include "engine_buffers.cuh"
#include "prefill.cuh"
#include "skinny.cuh"
#include "step.cuh"
#include "weights.cuh"

namespace db::cuda {

void Engine::linear_rows(int64_t layer, LoraSite site, const LinearOp& op, const __half* x, float* y,
                         bool accumulate) {
  Buffers& b = *buf_;
  const int64_t B = batch_, rows = op.m.rows, cols = op.m.cols;
  switch (op.impl) {
    case LinearImpl::gemv_fast:
      if (skinny_takes(op.m, B)) {
        gemm_skinny_tuned(op.m, x, B, y, accumulate, b.skinny_workspace, op.skinny, stream_);
        break;
      }
      // fp16 goes to cuBLAS, and what the skinny GEMM does not take (the int4 fragment
      // layout, more than 64 sequences: skinny_takes says why) as an fp16 copy through cuBLAS,
      // as the prefill runs it.
      if (op.m.scheme == Scheme::fp16) {
        gemm_rows(cublas_, static_cast<const __half*>(op.m.qweight), rows, cols, x, B, y, accumulate);
      } else {
        dequantize_any_to_f16(op.m, b.dequant, stream_);
        gemm_rows(cublas_, b.dequant, rows, cols, x, B, y, accumulate);
      }
      break;
    case LinearImpl::gemv_naive:
      // The slow path stays itself: the plain GEMV once a sequence, the weights read B times.
      for (int64_t s = 0; s < B; ++s) {
        GemvOutput out{accumulate ? Epilogue::residual : Epilogue::store, y + s * rows, nullptr};
        if (accumulate) {
          out.y = nullptr;
          out.resid = y + s * rows;
        }
        gemv(op.m, GemvInput{x + s * cols}, out, GemvVariant::naive, stream_);
      }
      break;
    case LinearImpl::cublas:
      gemm_rows(cublas_, static_cast<const __half*>(op.m.qweight), rows, cols, x, B, y, accumulate);
      break;
    case LinearImpl::dequant_cublas:
      dequantize_to_f16(op.m, b.dequant, stream_);
      gemm_rows(cublas_, b.dequant, rows, cols, x, B, y, accumulate);
      break;
  }
  if (weights_->lora_rank() == 0 || layer < 0) return;  // no external adapter, or the lm_head
  const LoraGroup& g = weights_->lora_groups()[layer][static_cast<int>(site)];
  if (g.targets > 0) lora_rows(cublas_, g, x, B, b.lora_rows, y, rows, stream_);
}

void Engine::tune_skinny_shapes() {
  Buffers& b = *buf_;
  // The choices of this process, by device, matrix kind and groups of 8 sequences.
  static std::mutex mutex;
  static std::map<std::string, SkinnyChoice> chosen;
  struct Kind {
    const char* name;
    std::vector<LinearOp*> ops;
    float* y;  // the step's output buffer for it
  };
  std::vector<Kind> kinds = {{"qkv", {}, b.qkv},
                             {"o_proj", {}, b.resid},
                             {"gate_up", {}, b.gate_up},
                             {"down_proj", {}, b.resid},
                             {"lm_head", {&lm_head_}, b.logits}};
  for (DeviceLayer& d : layers_) {
    kinds[0].ops.push_back(&d.qkv);
    kinds[1].ops.push_back(&d.o);
    kinds[2].ops.push_back(&d.gate_up);
    kinds[3].ops.push_back(&d.down);
  }
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const int64_t group = (std::min(batch_, kSkinnyMaxBatch) + 7) / 8;  // sequence groups of 8
  for (Kind& k : kinds) {
    std::vector<LinearOp*> takes;
    std::vector<const DeviceMatrix*> ms;
    for (LinearOp* op : k.ops)
      if (op->impl == LinearImpl::gemv_fast && skinny_takes(op->m, batch_))
        takes.push_back(op), ms.push_back(&op->m);
    if (ms.empty()) continue;
    const DeviceMatrix& m = *ms.front();
    const std::string key = fmt::format("{} {} {} {}x{} g{} z{} {}", device, k.name, to_string(m.scheme),
                                        m.rows, m.cols, m.group_size, m.zero_point ? 1 : 0, group);
    SkinnyChoice c;
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = chosen.find(key);
      if (it == chosen.end())
        it = chosen.emplace(key, tune_skinny(ms, b.xnorm, batch_, k.y, b.skinny_workspace, stream_)).first;
      c = it->second;
    }
    for (LinearOp* op : takes) op->skinny = c.tuning;
    skinny_shapes_.push_back(fmt::format("{} [{} x {}]: {}, {:.1f} us (default {} {:.1f} us)", k.name, m.rows,
                                         m.cols, skinny_label(c.tuning), c.us, skinny_label(c.default_tuning),
                                         c.default_us));
  }
}

void Engine::enqueue_step_batch() {
  Buffers& b = *buf_;
  const int64_t B = batch_, H = c_.hidden_size, I = c_.intermediate_size;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  embed_rows(static_cast<const __half*>(embedding_.qweight), H, batch_state_.tokens, B, b.resid, stream_);
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    const DeviceLayer& d = layers_[l];
    rmsnorm_rows(b.resid, d.attn_norm, eps, B, H, b.xnorm, stream_);
    linear_rows(l, LoraSite::qkv, d.qkv, b.xnorm, b.qkv, false);

    // The O GEMM is a plain launch: no early launch to let in.
    attention(attention_args(d, batch_state_.pos), stream_, static_cast<int>(B));

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

void Engine::set_inputs(int64_t pos, const std::vector<int32_t>& tokens) {
  if (static_cast<int64_t>(tokens.size()) != batch_)
    fail("set_inputs: {} tokens for a batch of {}", tokens.size(), batch_);
  // The tokens and pos lie side by side in the state (Buffers::state): one copy.
  std::vector<int32_t> v(tokens);
  v.push_back(static_cast<int32_t>(pos));
  CUDA_CHECK(cudaMemcpyAsync(buf_->state, v.data(), 4 * v.size(), cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // `v` lives on this stack frame
}

std::vector<float> Engine::logits(int64_t s) {
  if (s < 0 || s >= batch_) fail("logits of sequence {}: the batch has {}", s, batch_);
  std::vector<float> v(static_cast<size_t>(c_.vocab_size));
  CUDA_CHECK(cudaMemcpyAsync(v.data(), buf_->logits + s * c_.vocab_size, 4 * v.size(), cudaMemcpyDeviceToHost,
                             stream_));
  synchronize();
  return v;
}

std::vector<int32_t> Engine::tokens(int64_t s, int64_t n) {
  if (s < 0 || s >= batch_) fail("tokens of sequence {}: the batch has {}", s, batch_);
  std::vector<int32_t> v(static_cast<size_t>(n));
  CUDA_CHECK(cudaMemcpyAsync(v.data(), buf_->tokens_out + s * positions_, 4 * v.size(),
                             cudaMemcpyDeviceToHost, stream_));
  synchronize();
  return v;
}

std::vector<int32_t> Engine::next_tokens() {
  std::vector<int32_t> v(static_cast<size_t>(batch_));
  CUDA_CHECK(cudaMemcpyAsync(v.data(), buf_->state, 4 * v.size(), cudaMemcpyDeviceToHost, stream_));
  synchronize();
  return v;
}

}  // namespace db::cuda

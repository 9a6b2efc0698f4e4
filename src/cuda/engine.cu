// The CUDA decode engine (see src/cuda/engine.cuh): it carries out the linear plan
// (decodebench/linear_plan.h) over the weights, its KV cache and buffers, one step at a time.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <functional>

#include "attention.cuh"
#include "attention_mma.cuh"
#include "common.cuh"
#include "decodebench/accounting.h"
#include "decodebench/kv_quant.h"
#include "decodebench/rope.h"
#include "engine.cuh"
#include "engine_buffers.cuh"
#include "engine_lora.cuh"
#include "mixed_gemm.cuh"
#include "pdl.cuh"
#include "skinny.cuh"
#include "weights.cuh"
#ifdef DB_DEV
#include "dev_delay.cuh"
#endif

namespace db::cuda {

namespace {

constexpr size_t kCublasWorkspace = size_t{32} << 20;

// gemm_skinny's workspace for the matrices the batched step runs through it (zero: none).
uint64_t skinny_workspace(const LinearPlan& plan) {
  uint64_t n = 0;
  for (const LinearChoice& l : plan.linears)
    if (l.batched == BatchedPath::skinny_gemm)
      n = std::max<uint64_t>(n, skinny_workspace_bytes(l.shape.rows, l.shape.cols, plan.batch));
  return n;
}

// gemm_mixed's workspace for the matrices the batched step runs through it (zero: none).
uint64_t mixed_workspace(const LinearPlan& plan) {
  uint64_t n = 0;
  for (const LinearChoice& l : plan.linears)
    if (l.batched == BatchedPath::mixed_gemm)
      n = std::max<uint64_t>(n, mixed_gemm_workspace_bytes(l.shape.rows, l.shape.cols, plan.batch));
  return n;
}

}  // namespace

int device_capability() {
  return 10 * device_attribute(cudaDevAttrComputeCapabilityMajor) +
         device_attribute(cudaDevAttrComputeCapabilityMinor);
}

LinearPlan device_plan(const ModelConfig& c, const KernelInfo& kernel, int64_t batch, bool fallback) {
  return plan_linears(c, kernel, batch, device_capability(), fallback, mixed_gemm_built());
}

WeightLayout weight_layout(const ModelConfig& c, const KernelInfo& kernel, int64_t batch) {
  return device_plan(c, kernel, batch, true).weight_layout();
}

std::shared_ptr<const DeviceWeights> load_device_weights(const WeightSource& ws, const KernelInfo& kernel,
                                                         int64_t positions, bool fallback, int64_t batch) {
  const ModelConfig& c = ws.config();
  Engine::check_kernel(c, kernel, fallback);  // a kernel that cannot run these shapes fails before loading
  const WeightLayout layout = weight_layout(c, kernel, batch);
  const DeviceWeights::Plan w = DeviceWeights::plan(ws, layout);
  const MemoryUse e = Engine::plan(c, kernel, positions, external_lora_rank(ws), batch, fallback);
  // Conservative by the loading buffers, which are freed before the engine allocates.
  const uint64_t need = w.weights_bytes + w.load_bytes + e.total_bytes;
  check_free_memory(need, [&] {
    return fmt::format(
        "not enough GPU memory for {} at {} positions: need {} (weights {}, KV cache {}, scratch {}, loading "
        "buffers {})",
        c.name, positions, gb(need), gb(w.weights_bytes), gb(e.kv_cache_bytes), gb(e.scratch_bytes),
        gb(w.load_bytes));
  });
  return std::make_shared<const DeviceWeights>(ws, layout);
}

// ------------------------------------------------------------------------ engine

int64_t Engine::dequant_chunk_bytes() {
#ifdef DB_DEV
  static const int64_t bytes = [] {
    const char* mb = std::getenv("DECODEBENCH_DEQUANT_CHUNK_MB");
    if (!mb || !*mb) return kDequantChunkBytes;
    const double v = std::atof(mb);
    if (!(v > 0)) fail("DECODEBENCH_DEQUANT_CHUNK_MB={}: a positive number of MiB", mb);
    return static_cast<int64_t>(v * (1 << 20));
  }();
  return bytes;
#else
  return kDequantChunkBytes;
#endif
}

MemoryUse Engine::plan(const ModelConfig& c, const KernelInfo& kernel, int64_t positions, int64_t lora_rank,
                       int64_t batch, bool fallback) {
  LinearPlan p = device_plan(c, kernel, batch, fallback);
  p.dequant_chunk_bytes = dequant_chunk_bytes();
  return memory_use(p, c, positions, lora_rank);
}

MemoryUse Engine::memory_use(const LinearPlan& plan, const ModelConfig& c, int64_t positions,
                             int64_t lora_rank) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, L = c.num_hidden_layers;
  const int64_t qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
  const int64_t max_in = std::max({H, I, qd});  // the largest linear input (xnorm)
  // Batch B: the cache, the activations, the attention partials and the step state B-fold;
  // at B > 1 also the batched step's own scratch (the constructor allocates the same).
  const uint64_t B = static_cast<uint64_t>(std::max<int64_t>(plan.batch, 1));
  const bool cublas = plan.uses_cublas() || (B > 1 && lora_rank > 0);  // the shrink is a GEMM
  MemoryUse m;
  // K and V of every layer and sequence, as kv_quant.h lays them out (fp16: 2 bytes an element).
  m.kv_cache_bytes = 2ull * L * B * kvq::sequence_bytes(c.kv_cache, positions, c.num_key_value_heads, hd);
  m.scratch_bytes =
      B * (4 * H + 4 * (qd + 2 * kvd) + 2 * qd + 2 * I + 4 * V + 2 * max_in + 4 * 2 * I) +
      4ull * positions * hd + B * 4ull * c.num_attention_heads * attention_splits(positions) * (hd + 2) +
      B * 4 * c.num_key_value_heads + 4 * (B + 2 + B * positions) + 8 * B + 8 * (2 * L + 1) * kNormSlots +
      2ull * plan.fp16_copy_elements() + (plan.gemv_blocks() ? 2 * H : 0) + (cublas ? kCublasWorkspace : 0) +
      skinny_workspace(plan) + mixed_workspace(plan) + (B > 1 ? 4ull * B * 3 * lora_rank : 0) +
      lora_scratch_bytes(c, lora_rank);
  m.total_bytes = m.kv_cache_bytes + m.scratch_bytes;
  return m;
}

std::vector<std::string> Engine::fallbacks(const ModelConfig& c, const KernelInfo& kernel) {
  return device_plan(c, kernel, 1, true).fallbacks();
}

void Engine::check_kernel(const ModelConfig& c, const KernelInfo& kernel, bool fallback) {
  if (c.head_dim % 8 != 0 || c.head_dim > 256)
    fail(
        "{}: head_dim {} is not supported by the CUDA attention (a multiple of 8 up to 256; --backend cpu "
        "runs it)",
        c.name, c.head_dim);
  check_plan(device_plan(c, kernel, 1, fallback));
}

namespace {
const DeviceWeights& non_null(const std::shared_ptr<const DeviceWeights>& w) {
  if (!w) fail("Engine: no weights");
  return *w;
}
}  // namespace

Engine::Engine(const WeightSource& ws, const KernelInfo& kernel, int64_t positions, bool fallback,
               int64_t batch)
    : Engine(load_device_weights(ws, kernel, positions, fallback, batch), kernel, positions, fallback,
             batch) {
  load_s_ += weights_->load_seconds();  // it loaded them for itself
}

namespace {
ModelConfig with_kv(ModelConfig c, std::optional<KvScheme> kv) {
  if (kv) c.kv_cache = *kv;
  return c;
}
}  // namespace

Engine::Engine(std::shared_ptr<const DeviceWeights> weights, const KernelInfo& kernel, int64_t positions,
               bool fallback, int64_t batch, std::optional<KvScheme> kv, int64_t dequant_chunk_bytes)
    : c_(with_kv(non_null(weights).config(), kv)),
      positions_(positions),
      batch_(batch),
      plan_(device_plan(c_, kernel, batch, fallback)),
      weights_(std::move(weights)),
      buf_(std::make_unique<Buffers>()) {
  const auto t0 = std::chrono::steady_clock::now();
  const DeviceWeights& w = *weights_;
  const int64_t H = c_.hidden_size, I = c_.intermediate_size, V = c_.vocab_size, L = c_.num_hidden_layers;
  const int64_t qd = c_.q_dim(), kvd = c_.kv_dim(), hd = c_.head_dim;

  // --- checks, before anything is allocated
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (device != w.device())
    fail("the weights are on GPU {}, the engine would run on GPU {}", w.device(), device);
  if (w.layout() != plan_.weight_layout())
    fail("kernel {} reads the {} weight layout, these weights are in the {} layout", kernel.name,
         plan_.weight_layout().name(), w.layout().name());
  check_kernel(c_, kernel, fallback);
  // The batch-1 step's gather (embed) reads the canonical table; the plan lays a tied lm_head,
  // and so the embedding, in the fp16 tiles only at 2 sequences and more (embed_rows reads those).
  if (batch == 1 && w.embedding().fp16_tiles)
    fail(
        "the batch-1 step reads the embedding in the canonical layout, these weights hold it in the fp16 "
        "tiles");
  if (batch < 1 || batch > kMaxBatch)
    fail("a batch of {} sequences: the engine runs 1 to {}", batch, kMaxBatch);
  if (dequant_chunk_bytes < 0) fail("fp16 copies in blocks of {} bytes", dequant_chunk_bytes);
  plan_.dequant_chunk_bytes = dequant_chunk_bytes > 0 ? dequant_chunk_bytes : Engine::dequant_chunk_bytes();
  const int64_t B = batch;

  // --- the memory plan: the weights are resident already, so free memory need only hold the
  // engine's own part (counting the weights again would refuse runs that fit).
  const MemoryUse own = memory_use(plan_, c_, positions, w.lora_rank());
  memory_ = own;
  memory_.weights_bytes = w.bytes();
  memory_.total_bytes = w.bytes() + own.total_bytes;
  check_free_memory(own.total_bytes, [&] {
    return fmt::format(
        "not enough GPU memory for {} at {} positions: need {} (KV cache {}, scratch {}; the weights' {} are "
        "on "
        "the device already)",
        c_.name, positions, gb(own.total_bytes), gb(own.kv_cache_bytes), gb(own.scratch_bytes),
        gb(w.bytes()));
  });
  buf_->max_splits = attention_splits(positions);
  attention_mma_ =
      attention_mma_chosen(positions, static_cast<int>(hd), static_cast<int>(c_.num_attention_heads),
                           static_cast<int>(c_.num_key_value_heads));

  // The destructor does not run when a constructor throws, and a sweep goes on after a failed
  // instance: release what was made so far then.
  struct Guard {
    Engine* e;
    ~Guard() {
      if (e) e->release();
    }
  } guard{this};
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  auto alloc = [&](size_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
    allocations_.push_back(p);
    return p;
  };

  // --- the layers as the step runs them: the shared weights, each linear run as the plan says
  layers_.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    const DeviceWeights::Layer& src = w.layers()[l];
    DeviceLayer& d = layers_[l];
    d.attn_norm = src.attn_norm;
    d.mlp_norm = src.mlp_norm;
    d.q_norm = src.q_norm;
    d.k_norm = src.k_norm;
    d.qkv_bias = src.qkv_bias;
    d.qkv = {src.qkv, MatrixKind::qkv};
    d.o = {src.o, MatrixKind::o};
    d.gate_up = {src.gate_up, MatrixKind::gate_up};
    d.down = {src.down, MatrixKind::down};
    // Sequence s's cache of `positions` rows at s * sequence_bytes: the stride attention
    // derives from rope_positions, which is positions_ too (one rope table of the cache's
    // length).
    const uint64_t cache = kvq::sequence_bytes(c_.kv_cache, positions, c_.num_key_value_heads, hd);
    d.k_cache = static_cast<__half*>(alloc(B * cache));
    d.v_cache = static_cast<__half*>(alloc(B * cache));
  }
  embedding_ = w.embedding();
  lm_head_ = {w.lm_head(), MatrixKind::lm_head};
  final_norm_ = w.final_norm();

  // --- activations and state
  Buffers& b = *buf_;
  b.resid = static_cast<float*>(alloc(4 * H * B));
  b.qkv = static_cast<float*>(alloc(4 * (qd + 2 * kvd) * B));
  b.attn = static_cast<__half*>(alloc(2 * qd * B));
  b.act = static_cast<__half*>(alloc(2 * I * B));
  b.logits = static_cast<float*>(alloc(4 * V * B));
  b.xnorm = static_cast<__half*>(alloc(2 * std::max({H, I, qd}) * B));
  b.gate_up = static_cast<float*>(alloc(4 * 2 * I * B));
  // dequant-cublas's whole fp16 copy, or the batched step's two blocks (fp16_copy_elements).
  if (const int64_t n = plan_.fp16_copy_elements(); n > 0) b.dequant = static_cast<__half*>(alloc(2 * n));
  const std::vector<float> rope = rope_table(c_, positions);
  b.rope = static_cast<float*>(alloc(4 * rope.size()));
  CUDA_CHECK(cudaMemcpyAsync(b.rope, rope.data(), 4 * rope.size(), cudaMemcpyHostToDevice, stream_));
  b.part_o = static_cast<float*>(alloc(4ull * c_.num_attention_heads * b.max_splits * hd * B));
  b.part_ml = static_cast<float*>(alloc(4ull * c_.num_attention_heads * b.max_splits * 2 * B));
  b.counters = static_cast<unsigned*>(alloc(4 * c_.num_key_value_heads * B));
  CUDA_CHECK(cudaMemsetAsync(b.counters, 0, 4 * c_.num_key_value_heads * B, stream_));
  // The normalized GEMVs read x from an fp16 copy of the residual stream, which its writers
  // (embed, and the O and down GEMVs' residual epilogue) store beside it: half the bytes that
  // every block of QKV and gate/up fetches at once right after its wait (8b-int4 4-5% faster).
  // Only where the blocks' linears are GEMVs (LinearPlan::gemv_blocks, as the statistics
  // below): the cuBLAS paths' epilogue does not write it, and their RMSNorm kernel reads the
  // float stream. memory_use counts it on the same condition.
  if (plan_.gemv_blocks()) b.resid_h = static_cast<__half*>(alloc(2 * H));
  // token [B], then pos and first_pos: set_inputs() writes the tokens and pos in one copy.
  b.state = static_cast<int32_t*>(alloc(4 * (B + 2)));
  CUDA_CHECK(cudaMemsetAsync(b.state, 0, 4 * (B + 2), stream_));
  b.tokens_out = static_cast<int32_t*>(alloc(4 * positions * B));
  b.key = static_cast<unsigned long long*>(alloc(8 * B));
  CUDA_CHECK(cudaMemsetAsync(b.key, 0, 8 * B, stream_));
  // RMSNorm statistics flow from kernel to kernel only when every linear of the blocks is one
  // of our GEMVs (they write and read them, LinearPlan::gemv_blocks); the cuBLAS paths normalize
  // in a kernel of their own.
  const int stats_count = static_cast<int>((2 * L + 1) * kNormSlots);
  b.norm_stats = static_cast<unsigned long long*>(alloc(8ull * stats_count));
  CUDA_CHECK(cudaMemsetAsync(b.norm_stats, 0, 8ull * stats_count, stream_));
  step_state_ =
      StepState{b.state, b.state + B, b.state + B + 1, b.tokens_out, b.key, b.norm_stats, stats_count};
  batch_state_ = BatchState{b.state, b.state + B, b.state + B + 1, b.tokens_out, b.key, B, positions};
  if (const uint64_t n = skinny_workspace(plan_); n > 0) {
    b.skinny_workspace = alloc(n);
    CUDA_CHECK(cudaMemsetAsync(b.skinny_workspace, 0, n, stream_));
  }
  if (const uint64_t n = mixed_workspace(plan_); n > 0) {
    b.mixed_workspace = alloc(n);
    CUDA_CHECK(cudaMemsetAsync(b.mixed_workspace, 0, n, stream_));
    mixed_gemm_setup();  // before the step is captured into a graph
  }
  if (B > 1 && w.lora_rank() > 0) b.lora_rows = static_cast<float*>(alloc(4ull * B * 3 * w.lora_rank()));
  if (plan_.uses_cublas() || (B > 1 && w.lora_rank() > 0)) {  // an external adapter's shrink: a GEMM
    CUBLAS_CHECK(cublasCreate(&cublas_));
    CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    b.cublas_workspace = alloc(kCublasWorkspace);
    CUBLAS_CHECK(cublasSetWorkspace(cublas_, b.cublas_workspace, kCublasWorkspace));
  }
  setup_lora();
  if (B > 1) tune_batched_shapes();
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  capture_graph();
  guard.e = nullptr;
  load_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Engine::~Engine() {
  release();
}

void Engine::release() {
  if (graph_) cudaGraphExecDestroy(graph_);
  graph_ = nullptr;
  if (cublas_) cublasDestroy(cublas_);
  cublas_ = nullptr;
  for (void* p : allocations_) cudaFree(p);
  allocations_.clear();
  if (stream_) cudaStreamDestroy(stream_);
  stream_ = nullptr;
}

const float* Engine::rope() const {
  return buf_->rope;
}

AttentionArgs Engine::attention_args(const DeviceLayer& d, const int32_t* pos) const {
  const Buffers& b = *buf_;
  AttentionArgs a;
  a.qkv = b.qkv;  // W x, plus an external adapter's delta; attention adds the bias
  a.qkv_bias = d.qkv_bias;
  a.q_norm = d.q_norm;
  a.k_norm = d.k_norm;
  a.eps = static_cast<float>(c_.rms_norm_eps);
  a.rope = b.rope;
  a.rope_positions = positions_;  // also each sequence's cache length, the stride between them
  a.k_cache = d.k_cache;
  a.v_cache = d.v_cache;
  a.pos = pos;
  a.heads = static_cast<int>(c_.num_attention_heads);
  a.kv_heads = static_cast<int>(c_.num_key_value_heads);
  a.head_dim = static_cast<int>(c_.head_dim);
  a.max_splits = b.max_splits;
  a.part_o = b.part_o;
  a.part_ml = b.part_ml;
  a.counters = b.counters;
  a.out = b.attn;
  a.early_launch = false;
  return a;
}

void Engine::enqueue_attention(const AttentionArgs& a, int batch) {
  if (attention_mma_)
    attention_mma(a, stream_, batch, c_.kv_cache);
  else
    attention(a, stream_, batch, c_.kv_cache);
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

void Engine::set_first_position(int64_t pos) {
  const int32_t v = static_cast<int32_t>(pos);
  CUDA_CHECK(cudaMemcpyAsync(step_state_.first_pos, &v, sizeof v, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void Engine::run_linear(const LinearOp& op, const GemvInput& in, const GemvOutput& out) {
  const LinearImpl impl = plan_[op.kind].impl;
  if (impl == LinearImpl::gemv_fast || impl == LinearImpl::gemv_naive) {
    gemv(op.m, in, out, impl == LinearImpl::gemv_fast ? GemvVariant::fast : GemvVariant::naive, stream_);
    return;
  }
  // cuBLAS: the norm, the epilogue and (dequant-cublas) the fp16 copy are separate kernels.
  const __half* x = in.x;
  if (in.resid) {
    rmsnorm(in.resid, in.norm_w, in.eps, op.m.cols, buf_->xnorm, stream_);
    x = buf_->xnorm;
  }
  const __half* w = static_cast<const __half*>(op.m.qweight);
  if (impl == LinearImpl::dequant_cublas) {
    dequantize_to_f16(op.m, buf_->dequant, stream_);
    w = buf_->dequant;
  }
  const float alpha = 1.f;
  float beta = out.epilogue == Epilogue::residual ? 1.f : 0.f;
  float* y = out.epilogue == Epilogue::residual
                 ? out.resid
                 : (out.epilogue == Epilogue::silu_mul ? buf_->gate_up : out.y);
  // An addend (a LoRA delta) enters as cuBLAS's C, before the epilogue kernels as in the GEMVs:
  // added to the residual, or copied into y with beta 1.
  if (out.addend) {
    if (out.epilogue == Epilogue::residual)
      add_rows(y, out.addend, op.m.rows, stream_);
    else
      CUDA_CHECK(cudaMemcpyAsync(y, out.addend, 4 * op.m.rows, cudaMemcpyDeviceToDevice, stream_));
    beta = 1.f;
  }
  // Row-major W [rows, cols] is column-major W^T: y = op(W^T)^T x with op = transpose.
  CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(op.m.rows), 1,
                            static_cast<int>(op.m.cols), &alpha, w, CUDA_R_16F, static_cast<int>(op.m.cols),
                            x, CUDA_R_16F, static_cast<int>(op.m.cols), &beta, y, CUDA_R_32F,
                            static_cast<int>(op.m.rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (out.epilogue == Epilogue::silu_mul)
    silu_mul_interleaved(buf_->gate_up, op.m.rows / 2, out.act, stream_);
  if (out.epilogue == Epilogue::logits) argmax(out.y, op.m.rows, out.argmax_key, stream_);
}

void Engine::enqueue_step() {
  switch (plan_.step) {
    case StepMode::kernel_per_op:
      if (batch_ > 1)
        enqueue_step_batch();
      else
        enqueue_step_single();
      break;
  }
#ifdef DB_DEV
  enqueue_dev_delay(stream_);  // lab builds: DECODEBENCH_DEV_DELAY_US, a known slowdown (dev_delay.cuh)
#endif
}

void Engine::enqueue_step_single() {
  Buffers& b = *buf_;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  // The statistics of RMSNorm site s: 2l before layer l's attention, 2l + 1 before its MLP,
  // 2L before the lm_head; each is written by the kernel that last writes resid before it.
  const bool stats_flow = plan_.gemv_blocks();
  auto stats = [&](int64_t site) { return stats_flow ? b.norm_stats + site * kNormSlots : nullptr; };
  embed(static_cast<const __half*>(embedding_.qweight), c_.hidden_size, step_state_, b.resid, stats(0),
        stream_, b.resid_h);
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    const DeviceLayer& d = layers_[l];
    const float* qkv_delta = lora_delta(l, LoraSite::qkv, b.resid, b.resid_h, d.attn_norm,
                                        stats(2 * l));  // external LoRA, else null
    run_linear(d.qkv, {nullptr, b.resid, d.attn_norm, eps, stats(2 * l), b.resid_h},
               with_addend({Epilogue::store, b.qkv}, qkv_delta));

    AttentionArgs a = attention_args(d, step_state_.pos);
    a.early_launch = plan_.attention_triggers_early();
    enqueue_attention(a, 1);

    GemvOutput o_out{Epilogue::residual, nullptr, b.resid};
    o_out.sumsq = stats(2 * l + 1);
    o_out.resid_h = b.resid_h;
    o_out.addend = lora_delta(l, LoraSite::o, b.attn);
    run_linear(d.o, {b.attn}, o_out);
    const float* gate_up_delta =
        lora_delta(l, LoraSite::gate_up, b.resid, b.resid_h, d.mlp_norm, stats(2 * l + 1));
    run_linear(d.gate_up, {nullptr, b.resid, d.mlp_norm, eps, stats(2 * l + 1), b.resid_h},
               with_addend({Epilogue::silu_mul, nullptr, nullptr, b.act}, gate_up_delta));
    GemvOutput down_out{Epilogue::residual, nullptr, b.resid};
    down_out.sumsq = stats(2 * l + 2);
    down_out.resid_h = b.resid_h;
    down_out.addend = lora_delta(l, LoraSite::down, b.act);
    run_linear(d.down, {b.act}, down_out);
  }
  run_linear(lm_head_, {nullptr, b.resid, final_norm_, eps, stats(2 * c_.num_hidden_layers), b.resid_h},
             {Epilogue::logits, b.logits, nullptr, nullptr, b.key});
  finish_step(step_state_, stream_);
}

void Engine::capture_graph() {
  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  try {
    enqueue_step();
  } catch (...) {
    cudaStreamEndCapture(stream_, &g);
    if (g) cudaGraphDestroy(g);
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
  size_t nodes = 0;
  CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
  launches_per_step_ = static_cast<int>(nodes);
  CUDA_CHECK(cudaGraphInstantiate(&graph_, g, 0));
  CUDA_CHECK(cudaGraphDestroy(g));
}

void Engine::launch_graph() {
  CUDA_CHECK(cudaGraphLaunch(graph_, stream_));
}

void Engine::synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
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

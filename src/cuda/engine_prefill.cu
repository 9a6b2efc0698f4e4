// The CUDA engine's batched prefill (Engine::prefill): the prompt in chunks of rows, each
// chunk through every layer at once. The linears are cuBLAS GEMMs on fp16 weights (a
// quantized matrix is dequantized into scratch, whatever layout its kernel reads, and an fp16
// one in the tiles layout copied back to rows, in the blocks of rows the batched step uses, each
// block's GEMM right after it), the
// attention is kernels/prefill.cu's causal tensor-core kernel over the cache, and the K and V
// rows of the chunk go to the cache the decode step reads, in the engine's KV scheme. No
// lm_head: a prefill leaves the cache, and the first decode step feeds the next prompt token
// itself.
#include <algorithm>

#include "common.cuh"
#include "decodebench/kv_quant.h"
#include "decodebench/rope.h"
#include "engine.cuh"
#include "prefill.cuh"
#include "step.cuh"

namespace db::cuda {
namespace {

constexpr size_t kPrefillCublasWorkspace = size_t{32} << 20;

// The prefill's own device memory, freed when it returns.
struct PrefillBuffers {
  int64_t rows = 0;           // the chunk
  int32_t* tokens = nullptr;  // [rows]
  float* resid = nullptr;     // [rows, hidden]
  __half* x = nullptr;        // [rows, max(hidden, q_dim, intermediate)]: a GEMM's fp16 input
  float* qkv = nullptr;       // [rows, q_dim + 2 kv_dim]
  __half* q = nullptr;        // [rows, q_dim]
  float* gate_up = nullptr;   // [rows, 2 intermediate]
  __half* weight = nullptr;   // the blocks of a quantized matrix's fp16 copy (gemm_rows_dequant)
  float* lora = nullptr;      // [rows, targets * rank] of an external adapter
  void* workspace = nullptr;
  std::vector<void*> allocations;
};

}  // namespace

// Column-major, that is y^T = W x^T, with W^T's storage read transposed: y^T is [out, rows]
// with leading dimension ldy.
void gemm_rows(cublasHandle_t h, const __half* w, int64_t out, int64_t in, const __half* x, int64_t rows,
               float* y, bool accumulate, int64_t ldy) {
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(rows),
                            static_cast<int>(in), &alpha, w, CUDA_R_16F, static_cast<int>(in), x, CUDA_R_16F,
                            static_cast<int>(in), &beta, y, CUDA_R_32F, static_cast<int>(ldy > 0 ? ldy : out),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gemm_rows_dequant(cublasHandle_t h, const DeviceMatrix& w, const __half* x, int64_t rows, float* y,
                       bool accumulate, __half* scratch, int64_t chunk_rows, cudaStream_t s) {
  if (chunk_rows <= 0 || (chunk_rows < w.rows && chunk_rows % 8 != 0))
    fail("gemm_rows_dequant: blocks of {} rows of a matrix of {} (a multiple of 8, or all of them)",
         chunk_rows, w.rows);
  // One stream, block after block: block i + 1's dequantization overwrites the other half
  // only after block i - 1's GEMM has read it.
  for (int64_t r0 = 0, i = 0; r0 < w.rows; r0 += chunk_rows, ++i) {
    const int64_t r1 = std::min(w.rows, r0 + chunk_rows);
    __half* block = scratch + (i % 2) * chunk_rows * w.cols;
    dequantize_rows_to_f16(w, r0, r1, block, s);
    gemm_rows(h, block, r1 - r0, w.cols, x, rows, y + r0, accumulate, w.rows);
  }
}

void lora_rows(cublasHandle_t h, const LoraGroup& g, const __half* x, int64_t rows, float* t, float* y,
               int64_t out, cudaStream_t s) {
  gemm_rows(h, g.a, int64_t{g.targets} * g.rank, g.in, x, rows, t, false);
  lora_expand_rows(g, t, rows, y, out, s);
}

int64_t Engine::prefill_dequant_elements() const {
  int64_t n = 0;
  for (const DeviceLayer& d : layers_)
    for (const LinearOp* op : {&d.qkv, &d.o, &d.gate_up, &d.down})
      if (op->m.scheme != Scheme::fp16 || in_tiles(op->m))  // fp16 in the tiles layout: a copy too
        n = std::max(n, fp16_chunk_elements(op->m.rows, op->m.cols, plan_.dequant_chunk_bytes));
  return n;
}

uint64_t Engine::prefill_scratch_bytes(int64_t rows) const {
  const int64_t H = c_.hidden_size, I = c_.intermediate_size, qd = c_.q_dim(), kvd = c_.kv_dim();
  const int64_t in = std::max({H, qd, I});
  const uint64_t lora = 4ull * rows * 3 * weights_->lora_rank();  // at most q, k, v adapted in a group
  return rows * (4ull + 4 * H + 2 * in + 4 * (qd + 2 * kvd) + 2 * qd + 4 * 2 * I) +
         2ull * prefill_dequant_elements() + lora + kPrefillCublasWorkspace;
}

void Engine::prefill(const std::vector<int32_t>& tokens, int64_t chunk, int64_t sequence) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return;
  if (n > positions_) fail("prefill of {} tokens: the KV cache holds {} positions", n, positions_);
  if (sequence < 0 || sequence >= batch_) fail("prefill of sequence {}: the batch has {}", sequence, batch_);
  // The sequence's slice of each layer's cache, in bytes (decodebench/kv_quant.h).
  const int64_t cache_offset = sequence * static_cast<int64_t>(kvq::sequence_bytes(
                                              c_.kv_cache, positions_, c_.num_key_value_heads, c_.head_dim));
  const auto slice = [&](__half* cache) {
    return reinterpret_cast<__half*>(reinterpret_cast<uint8_t*>(cache) + cache_offset);
  };
  // The chunk: as asked, else the default, halved while its scratch would take more than half
  // of what is free (a long context leaves less room beside its cache).
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  int64_t rows = std::min(n, chunk > 0 ? chunk : kPrefillChunk);
  while (rows > 16 && prefill_scratch_bytes(rows) > free_b / 2) rows /= 2;
  if (prefill_scratch_bytes(rows) > free_b)
    fail("not enough GPU memory for the prefill's scratch: {} bytes needed, {} free",
         prefill_scratch_bytes(rows), free_b);

  PrefillBuffers b;
  b.rows = rows;
  cublasHandle_t cublas = nullptr;
  struct Cleanup {
    PrefillBuffers& b;
    cublasHandle_t& h;
    ~Cleanup() {
      if (h) cublasDestroy(h);
      for (void* p : b.allocations) cudaFree(p);
    }
  } cleanup{b, cublas};
  auto alloc = [&](uint64_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<uint64_t>(bytes, 16)));
    b.allocations.push_back(p);
    return p;
  };
  const int64_t H = c_.hidden_size, I = c_.intermediate_size, qd = c_.q_dim(), kvd = c_.kv_dim();
  const int64_t in = std::max({H, qd, I});
  b.tokens = static_cast<int32_t*>(alloc(4ull * rows));
  b.resid = static_cast<float*>(alloc(4ull * rows * H));
  b.x = static_cast<__half*>(alloc(2ull * rows * in));
  b.qkv = static_cast<float*>(alloc(4ull * rows * (qd + 2 * kvd)));
  b.q = static_cast<__half*>(alloc(2ull * rows * qd));
  b.gate_up = static_cast<float*>(alloc(8ull * rows * I));
  if (const int64_t n = prefill_dequant_elements(); n > 0) b.weight = static_cast<__half*>(alloc(2ull * n));
  if (weights_->lora_rank() > 0) b.lora = static_cast<float*>(alloc(4ull * rows * 3 * weights_->lora_rank()));
  b.workspace = alloc(kPrefillCublasWorkspace);
  CUBLAS_CHECK(cublasCreate(&cublas));
  CUBLAS_CHECK(cublasSetStream(cublas, stream_));
  CUBLAS_CHECK(cublasSetWorkspace(cublas, b.workspace, kPrefillCublasWorkspace));

  const float eps = static_cast<float>(c_.rms_norm_eps);
  // y (+)= x W^T for the chunk's `m` rows, plus an external adapter's low-rank term at `site`;
  // a quantized W, or an fp16 one in the tiles layout, through its fp16 copy in blocks of rows,
  // as the batched step makes it.
  auto linear = [&](int64_t l, LoraSite site, const LinearOp& op, const __half* x, int64_t m, float* y,
                    bool accumulate) {
    if (op.m.scheme == Scheme::fp16 && !in_tiles(op.m))
      gemm_rows(cublas, static_cast<const __half*>(op.m.qweight), op.m.rows, op.m.cols, x, m, y, accumulate);
    else
      gemm_rows_dequant(cublas, op.m, x, m, y, accumulate, b.weight,
                        fp16_chunk_rows(op.m.rows, op.m.cols, plan_.dequant_chunk_bytes), stream_);
    if (weights_->lora_rank() == 0) return;
    const LoraGroup& g = weights_->lora_groups()[l][static_cast<int>(site)];
    if (g.targets > 0) lora_rows(cublas, g, x, m, b.lora, y, op.m.rows, stream_);
  };

  for (int64_t p0 = 0; p0 < n; p0 += rows) {
    const int64_t m = std::min(rows, n - p0);
    CUDA_CHECK(cudaMemcpyAsync(b.tokens, tokens.data() + p0, 4 * m, cudaMemcpyHostToDevice, stream_));
    embed_rows(embedding_, b.tokens, m, b.resid, stream_);
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      const DeviceLayer& d = layers_[l];
      rmsnorm_rows(b.resid, d.attn_norm, eps, m, H, b.x, stream_);
      linear(l, LoraSite::qkv, d.qkv, b.x, m, b.qkv, false);
      PrefillQkvArgs qa;
      qa.qkv = b.qkv;
      qa.qkv_bias = d.qkv_bias;
      qa.q_norm = d.q_norm;
      qa.k_norm = d.k_norm;
      qa.eps = eps;
      qa.rope = rope();
      qa.rope_positions = positions_;
      qa.p0 = p0;
      qa.rows = m;
      qa.heads = static_cast<int>(c_.num_attention_heads);
      qa.kv_heads = static_cast<int>(c_.num_key_value_heads);
      qa.head_dim = static_cast<int>(c_.head_dim);
      qa.q = b.q;
      qa.k_cache = slice(d.k_cache);
      qa.v_cache = slice(d.v_cache);
      qa.cache_positions = positions_;
      qa.kv = c_.kv_cache;
      prefill_qkv(qa, stream_);
      PrefillAttentionArgs aa;
      aa.q = b.q;
      aa.k_cache = qa.k_cache;
      aa.v_cache = qa.v_cache;
      aa.cache_positions = positions_;
      aa.kv = c_.kv_cache;
      aa.p0 = p0;
      aa.rows = m;
      aa.heads = qa.heads;
      aa.kv_heads = qa.kv_heads;
      aa.head_dim = qa.head_dim;
      aa.out = b.x;  // the O GEMM's input
      prefill_attention_kernel_ = to_string(prefill_attention(aa, stream_));
      linear(l, LoraSite::o, d.o, b.x, m, b.resid, true);
      rmsnorm_rows(b.resid, d.mlp_norm, eps, m, H, b.x, stream_);
      linear(l, LoraSite::gate_up, d.gate_up, b.x, m, b.gate_up, false);
      silu_mul_interleaved(b.gate_up, m * I, b.x, stream_);  // rows are contiguous: one flat pass
      linear(l, LoraSite::down, d.down, b.x, m, b.resid, true);
    }
  }
  synchronize();  // the scratch is freed on return
}

}  // namespace db::cuda

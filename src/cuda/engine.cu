// The CUDA decode engine and its device weights (see src/cuda/engine.cuh).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <functional>

#include "attention.cuh"
#include "common.cuh"
#include "decodebench/accounting.h"
#include "decodebench/rope.h"
#include "engine.cuh"
#include "engine_buffers.cuh"
#include "engine_lora.cuh"
#include "int4_frag.h"
#include "skinny.cuh"
#include "weights.cuh"
#ifdef DB_DEV
#include "dev_delay.cuh"
#endif

namespace db::cuda {

LinearImpl linear_impl(const KernelInfo& k) {
  const std::string v = k.name.substr(k.name.find('.') + 1);
  if (v == "gemv") return LinearImpl::gemv_fast;
  if (v == "naive") return LinearImpl::gemv_naive;
  if (v == "cublas") return LinearImpl::cublas;
  if (v == "dequant-cublas") return LinearImpl::dequant_cublas;
  fail("kernel {} has no CUDA implementation", k.name);
}

namespace {

constexpr size_t kStageBytes = size_t{64} << 20;
constexpr size_t kCublasWorkspace = size_t{32} << 20;

// Host -> device through one pinned buffer: host memory stays bounded by the stage size
// whatever the model size (the file itself is only mapped).
class Stager {
 public:
  Stager() {
    CUDA_CHECK(cudaMallocHost(&host_, kStageBytes));
    CUDA_CHECK(cudaMalloc(&dev_, kStageBytes));
  }
  ~Stager() {
    cudaFreeHost(host_);
    cudaFree(dev_);
  }
  const void* upload(const uint8_t* src, size_t bytes, cudaStream_t s) {
    CUDA_CHECK(cudaStreamSynchronize(s));  // the previous chunk's consumers are done
    std::memcpy(host_, src, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dev_, host_, bytes, cudaMemcpyHostToDevice, s));
    return dev_;
  }

 private:
  void* host_ = nullptr;
  void* dev_ = nullptr;
};

void fill_matrix(const WeightSource& ws, const Origin& o, const DeviceMatrix& dst, RowMap map, Stager& stager,
                 cudaStream_t s) {
  const int64_t rows = o.shape[0], cols = o.shape[1];
  switch (o.kind) {
    case OriginKind::synthetic:
      quantize_synthetic(dst, map, 0, rows, SyntheticSource{ws.seed(), o.tensor_id, o.dist}, s);
      return;
    case OriginKind::dense: {
      const size_t row_bytes = static_cast<size_t>(cols) * dtype_size(o.dense->dtype);
      const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(kStageBytes / row_bytes));
      for (int64_t r = 0; r < rows; r += chunk) {
        const int64_t n = std::min(chunk, rows - r);
        const void* d = stager.upload(o.dense->data + r * row_bytes, n * row_bytes, s);
        quantize_dense(dst, map, n, DenseSource{d, o.dense->dtype, r}, s);
      }
      return;
    }
    case OriginKind::quantized: {
      auto copy_rows = [&](const uint8_t* data, size_t nbytes, void* base) {
        if (!data || nbytes == 0) return;
        const size_t row_bytes = nbytes / static_cast<size_t>(rows);
        const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(kStageBytes / row_bytes));
        for (int64_t r = 0; r < rows; r += chunk) {
          const int64_t n = std::min(chunk, rows - r);
          const void* d = stager.upload(data + r * row_bytes, n * row_bytes, s);
          uint8_t* out = static_cast<uint8_t*>(base) + (map.offset + r * map.stride) * row_bytes;
          CUDA_CHECK(cudaMemcpy2DAsync(out, map.stride * row_bytes, d, row_bytes, row_bytes, n,
                                       cudaMemcpyDeviceToDevice, s));
        }
      };
      if (o.packing != Int4Packing::canonical) {
        // A GPTQ/AWQ linear: converted on the host (one matrix at a time, never merged with an
        // adapter here: the merge, where there is one, reads this as its base), then copied
        // as a decodebench file's canonical tensors are (the stager copies from host memory
        // before it returns).
        const QuantMatrix m =
            convert_packed_int4(o, ws.config().quant.group_size, ws.config().quant.zero_point);
        copy_rows(m.qweight.data(), m.qweight.size(), dst.qweight);
        copy_rows(reinterpret_cast<const uint8_t*>(m.scales.data()), 2 * m.scales.size(), dst.scales);
        copy_rows(m.zeros.data(), m.zeros.size(), dst.zeros);
        return;
      }
      const auto file_rows = [&](const TensorInfo* t, void* base) {
        if (t) copy_rows(t->data, t->nbytes, base);
      };
      file_rows(o.qweight, dst.qweight);
      file_rows(o.scales, dst.scales);
      file_rows(o.zeros, dst.zeros);
      return;
    }
  }
}

std::string gb(uint64_t b) {
  return fmt::format("{:.2f} GB", b / 1e9);
}

// The lm_head runs the blocks' kernel when it has their scheme, else the fast GEMV.
LinearImpl head_impl_of(const ModelConfig& c, LinearImpl impl) {
  return c.quant.lm_head == c.quant.scheme ? impl : LinearImpl::gemv_fast;
}

// Whether the fast GEMV can take a matrix of this shape (in the layout it would read).
bool fast_takes(DeviceMatrix m, const char** why) {
  m.int4_repacked = m.scheme == Scheme::int4;
  return gemv_supports(m, GemvVariant::fast, why);
}

// The weights' matrices as descriptors (shape and quantization, no memory), canonical layout:
// a layer's four fused linears in DeviceLayer order, the lm_head and the embedding.
struct Shapes {
  std::array<DeviceMatrix, 4> block;
  DeviceMatrix head, embedding;
  bool tied_head = false;  // the lm_head is the fp16 embedding itself
};

Shapes shapes(const ModelConfig& c) {
  const QuantConfig& q = c.quant;
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, qd = c.q_dim(),
                kvd = c.kv_dim();
  auto matrix = [&](int64_t rows, int64_t cols, Scheme s) {
    DeviceMatrix m;
    m.scheme = s;
    m.rows = rows;
    m.cols = cols;
    m.group_size = s == Scheme::int4 ? q.group_size : 0;
    m.zero_point = s == Scheme::int4 && q.zero_point;
    return m;
  };
  Shapes sh;
  sh.block = {matrix(qd + 2 * kvd, H, q.scheme), matrix(H, qd, q.scheme), matrix(2 * I, H, q.scheme),
              matrix(H, I, q.scheme)};
  sh.head = matrix(V, H, q.lm_head);
  sh.embedding = matrix(V, H, Scheme::fp16);
  sh.tied_head = c.tie_word_embeddings && q.lm_head == Scheme::fp16;
  return sh;
}

const char* const kSiteNames[] = {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};

// The kernel each matrix runs: the kernel's own, except that with `fallback` (--kernel auto)
// a matrix the fast GEMV cannot take (an input dimension that is not a multiple of 16 bytes
// of weights, a group size it cannot stream) runs the plain GEMV, which takes any shape.
struct SiteImpls {
  std::array<LinearImpl, 4> block;
  LinearImpl head = LinearImpl::gemv_fast;
  std::vector<std::string> fallbacks;  // one line per matrix that fell back, with why
};

SiteImpls site_impls(const ModelConfig& c, const KernelInfo& kernel, bool fallback) {
  const LinearImpl impl = linear_impl(kernel);
  const Shapes sh = shapes(c);
  SiteImpls s;
  auto choose = [&](const DeviceMatrix& m, LinearImpl li, const char* name) {
    const char* why = nullptr;
    if (li != LinearImpl::gemv_fast || !fallback || fast_takes(m, &why)) return li;
    s.fallbacks.push_back(
        fmt::format("{} [{} x {}]: {}.naive, since {}", name, m.rows, m.cols, to_string(m.scheme), why));
    return LinearImpl::gemv_naive;
  };
  for (int i = 0; i < 4; ++i) s.block[i] = choose(sh.block[i], impl, kSiteNames[i]);
  s.head = choose(sh.tied_head ? sh.embedding : sh.head, head_impl_of(c, impl), "lm_head");
  return s;
}

// What sizes an engine's scratch: derived alike by Engine::plan and the constructor.
struct ScratchDims {
  LinearImpl impl = LinearImpl::gemv_fast, head_impl = LinearImpl::gemv_fast;
  int64_t max_in = 0;        // the largest GEMV input (the cuBLAS paths' normalized x)
  int64_t largest = 0;       // elements of the largest matrix dequant-cublas materializes
  bool uses_cublas = false;  // the blocks' linears run cuBLAS (the lm_head then too)
};

ScratchDims scratch_dims(const ModelConfig& c, const KernelInfo& kernel) {
  ScratchDims d;
  d.impl = linear_impl(kernel);
  d.head_impl = head_impl_of(c, d.impl);
  d.max_in = std::max({c.hidden_size, c.intermediate_size, c.q_dim()});
  for (const DeviceMatrix& m : shapes(c).block) d.largest = std::max(d.largest, m.rows * m.cols);
  if (d.head_impl == LinearImpl::dequant_cublas)
    d.largest = std::max(d.largest, c.vocab_size * c.hidden_size);
  d.uses_cublas = d.impl == LinearImpl::cublas || d.impl == LinearImpl::dequant_cublas;
  return d;
}

// The linears of a step as an engine of `kernel` would hold them (shapes, layout, kernel),
// without memory: a layer's four (every layer's are alike), then the lm_head.
std::vector<LinearOp> planned_ops(const ModelConfig& c, const KernelInfo& kernel) {
  const Shapes sh = shapes(c);
  const SiteImpls impls = site_impls(c, kernel, false);
  const WeightLayout layout = weight_layout(c, kernel);
  auto laid = [](DeviceMatrix m, bool repacked) {  // as DeviceWeights::fill leaves it
    const char* why = nullptr;
    if (repacked && m.scheme == Scheme::int4 && fast_takes(m, &why)) {
      m.int4_repacked = true;
      m.int4_frag = int4_frag::preferred(m.rows, m.cols, m.group_size);
    }
    return m;
  };
  std::vector<LinearOp> ops;
  for (int i = 0; i < 4; ++i) ops.push_back({laid(sh.block[i], layout.block_int4_repacked), impls.block[i]});
  ops.push_back({sh.tied_head ? sh.embedding : laid(sh.head, layout.head_int4_repacked), impls.head});
  return ops;
}

}  // namespace

// The fast kernels' matrices at batch > 1: int8 and int4 run the skinny GEMM where it takes
// the layout, up to the 64 sequences of one launch; fp16 runs cuBLAS, and so do int8 and
// int4 above 64 sequences, on an fp16 copy. On 8b's layers on the H200
// (decodebench_skinny_bench, results/lab/batch.md) cuBLAS streams fp16 weights faster than
// the skinny GEMM at every batch above 1 (123-134 against 126-236 us a layer), and past 64
// sequences the skinny GEMM reads the weights once a launch of 64: the 8b-int4 step at 128
// sequences takes 17.7 ms that way and 16.3 ms on cuBLAS over fp16 copies (35.0 against 19.2
// at 256).
bool skinny_takes(const DeviceMatrix& m, int64_t batch) {
  const char* why = nullptr;
  return m.scheme != Scheme::fp16 && batch <= kSkinnyMaxBatch && skinny_supports(m, &why);
}

namespace {

// What the step at batch > 1 needs beside its activations: gemm_skinny's workspace for the
// fast kernels' matrices it takes, an fp16 copy for the quantized ones it does not (the int4
// fragment layout: dequantized, then cuBLAS) and for dequant-cublas, and whether cuBLAS runs.
struct BatchNeeds {
  uint64_t skinny_workspace = 0;
  int64_t dequant = 0;  // elements of the largest fp16 copy
  bool cublas = false;
};

BatchNeeds batch_needs(const std::vector<LinearOp>& ops, int64_t batch, bool external_lora) {
  BatchNeeds n;
  n.cublas = external_lora;  // the shrink is a GEMM
  for (const LinearOp& op : ops) {
    const int64_t elements = op.m.rows * op.m.cols;
    switch (op.impl) {
      case LinearImpl::gemv_fast:
        if (skinny_takes(op.m, batch)) {
          n.skinny_workspace =
              std::max<uint64_t>(n.skinny_workspace, skinny_workspace_bytes(op.m.rows, op.m.cols, batch));
        } else {
          n.cublas = true;
          if (op.m.scheme != Scheme::fp16) n.dequant = std::max(n.dequant, elements);
        }
        break;
      case LinearImpl::gemv_naive:
        break;
      case LinearImpl::cublas:
        n.cublas = true;
        break;
      case LinearImpl::dequant_cublas:
        n.cublas = true;
        n.dequant = std::max(n.dequant, elements);
        break;
    }
  }
  return n;
}

void check_free_memory(uint64_t need, const std::function<std::string()>& message) {
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (need > free_b) fail("{}, {} free of {}", message(), gb(free_b), gb(total_b));
}

}  // namespace

// ------------------------------------------------------------------------ weight layout

WeightLayout weight_layout(const ModelConfig& c, const KernelInfo& kernel) {
  const LinearImpl impl = linear_impl(kernel);
  WeightLayout l;
  l.block_int4_repacked = c.quant.scheme == Scheme::int4 && impl == LinearImpl::gemv_fast;
  l.head_int4_repacked = c.quant.lm_head == Scheme::int4 && head_impl_of(c, impl) == LinearImpl::gemv_fast;
  return l;
}

std::string WeightLayout::name() const {
  if (block_int4_repacked && head_int4_repacked) return "int4-repacked";
  if (block_int4_repacked) return "int4-repacked (lm_head canonical)";
  if (head_int4_repacked) return "canonical (lm_head int4-repacked)";
  return "canonical";
}

// ------------------------------------------------------------------------ device weights

DeviceWeights::Plan DeviceWeights::plan(const WeightSource& ws) {
  const ModelConfig& c = ws.config();
  const Shapes sh = shapes(c);
  uint64_t per_layer = 2 * c.hidden_size * 2 + (c.arch == Arch::qwen3 ? 2 * c.head_dim * 2 : 0);  // norms
  if (c.arch == Arch::qwen2) per_layer += qkv_bias_size(c) * 2;  // fp16 q/k/v biases
  for (const DeviceMatrix& m : sh.block) per_layer += device_matrix_bytes(m).total();
  const LoraBytes lora = lora_bytes(ws);
  Plan p;
  p.weights_bytes = per_layer * c.num_hidden_layers + device_matrix_bytes(sh.embedding).total() +
                    (sh.tied_head ? 0 : device_matrix_bytes(sh.head).total()) + c.hidden_size * 2 +
                    lora.weights;
  p.load_bytes = kStageBytes + lora.load;
  return p;
}

DeviceWeights::DeviceWeights(const WeightSource& ws, const WeightLayout& layout)
    : c_(ws.config()), layout_(layout) {
  const auto t0 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaGetDevice(&device_));
  const Plan p = plan(ws);
  check_free_memory(p.weights_bytes + p.load_bytes, [&] {
    return fmt::format(
        "not enough GPU memory for the weights of {}: need {} (weights {}, loading buffers {})", c_.name,
        gb(p.weights_bytes + p.load_bytes), gb(p.weights_bytes), gb(p.load_bytes));
  });
  bytes_ = p.weights_bytes;
  // The destructor does not run when a constructor throws, and a sweep goes on after a failed
  // instance: free what was allocated before passing the error on.
  try {
    fill(ws);
  } catch (...) {
    release();
    throw;
  }
  load_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

DeviceWeights::~DeviceWeights() {
  release();
}

void DeviceWeights::release() {
  for (void* p : allocations_) cudaFree(p);
  allocations_.clear();
}

void DeviceWeights::fill(const WeightSource& ws) {
  const int64_t H = c_.hidden_size, L = c_.num_hidden_layers, qd = c_.q_dim(), kvd = c_.kv_dim(),
                hd = c_.head_dim;
  // A stream of its own, synchronized before returning: engines on other streams read the result.
  struct Stream {
    cudaStream_t s = nullptr;
    ~Stream() {
      if (s) cudaStreamDestroy(s);
    }
  } stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream.s, cudaStreamNonBlocking));
  const cudaStream_t s = stream.s;
  auto alloc = [&](size_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
    allocations_.push_back(p);
    return p;
  };
  auto alloc_matrix = [&](DeviceMatrix& m) {
    const MatrixBytes b = device_matrix_bytes(m);
    m.qweight = alloc(b.weights);
    if (b.scales) m.scales = static_cast<__half*>(alloc(b.scales));
    if (b.zeros) m.zeros = static_cast<uint8_t*>(alloc(b.zeros));
  };

  Stager stager;
  LoraMerger merger(ws, s);  // a merged adapter: W + s B A into the linears it targets
  auto fill_linear = [&](const Origin& o, const DeviceMatrix& dst, RowMap map) {
    if (merger.merges(o))
      merger.merge(o, dst, map, [&](const DeviceMatrix& base) { fill_matrix(ws, o, base, {}, stager, s); });
    else
      fill_matrix(ws, o, dst, map, stager, s);
  };
  auto vec_into = [&](__half* p, const Origin& o) {
    if (o.kind == OriginKind::synthetic) {
      fill_synthetic_f16(p, o.shape[0], SyntheticSource{ws.seed(), o.tensor_id, o.dist}, s);
    } else {
      const void* d = stager.upload(o.dense->data, o.dense->nbytes, s);
      convert_to_f16(p, d, o.dense->dtype, o.shape[0], s);
    }
  };
  auto vec = [&](const Origin& o) {
    auto* p = static_cast<__half*>(alloc(o.shape[0] * 2));
    vec_into(p, o);
    return p;
  };
  const Shapes sh = shapes(c_);
  embedding_ = sh.embedding;
  alloc_matrix(embedding_);
  fill_matrix(ws, ws.embedding(), embedding_, {}, stager, s);
  layers_.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    Layer& d = layers_[l];
    d.attn_norm = vec(ws.vector(layer_norm_name(l, false), H));
    d.mlp_norm = vec(ws.vector(layer_norm_name(l, true), H));
    if (c_.arch == Arch::qwen3) {
      d.q_norm = vec(ws.vector(qk_norm_name(l, false), hd));
      d.k_norm = vec(ws.vector(qk_norm_name(l, true), hd));
    }
    if (c_.arch == Arch::qwen2) {  // one vector, q then k then v: the rows of d.qkv
      d.qkv_bias = static_cast<__half*>(alloc(qkv_bias_size(c_) * 2));
      vec_into(d.qkv_bias, ws.bias(l, Linear::q));
      vec_into(d.qkv_bias + qd, ws.bias(l, Linear::k));
      vec_into(d.qkv_bias + qd + kvd, ws.bias(l, Linear::v));
    }
    DeviceMatrix* ms[] = {&d.qkv, &d.o, &d.gate_up, &d.down};
    for (int i = 0; i < 4; ++i) {
      *ms[i] = sh.block[i];
      alloc_matrix(*ms[i]);
    }
    fill_linear(ws.linear(l, Linear::q), d.qkv, {0, 1});
    fill_linear(ws.linear(l, Linear::k), d.qkv, {qd, 1});
    fill_linear(ws.linear(l, Linear::v), d.qkv, {qd + kvd, 1});
    fill_linear(ws.linear(l, Linear::o), d.o, {0, 1});
    fill_linear(ws.linear(l, Linear::gate), d.gate_up, {0, 2});
    fill_linear(ws.linear(l, Linear::up), d.gate_up, {1, 2});
    fill_linear(ws.linear(l, Linear::down), d.down, {0, 1});
  }
  final_norm_ = vec(ws.vector(kFinalNormName, H));
  if (sh.tied_head) {
    lm_head_ = embedding_;
  } else {
    lm_head_ = sh.head;
    alloc_matrix(lm_head_);
    fill_matrix(ws, ws.lm_head(), lm_head_, {}, stager, s);
  }
  // Each kernel reads its own layout: the fast int4 GEMV the repacked one (weight_layout),
  // in the tensor-core dot's fragment layout where that pays (int4_frag::preferred).
  auto repack = [&](DeviceMatrix& m) {
    repack_int4(m, s, int4_frag::preferred(m.rows, m.cols, m.group_size));
  };
  // A matrix the fast GEMV cannot take stays canonical: --kernel auto runs the plain GEMV on
  // it (site_impls), and any other kernel that reads the repacked layout was refused.
  const char* why = nullptr;
  for (Layer& d : layers_)
    for (DeviceMatrix* m : {&d.qkv, &d.o, &d.gate_up, &d.down})
      if (layout_.block_int4_repacked && m->scheme == Scheme::int4 && fast_takes(*m, &why)) repack(*m);
  if (layout_.head_int4_repacked && !sh.tied_head && lm_head_.scheme == Scheme::int4 &&
      fast_takes(lm_head_, &why))
    repack(lm_head_);
  lora_groups_ = upload_external_lora(ws, alloc, s);
  lora_rank_ = lora_groups_.empty() ? 0 : ws.adapter()->rank;
  CUDA_CHECK(cudaStreamSynchronize(s));  // before the stager, the merger and the stream go
}

std::shared_ptr<const DeviceWeights> load_device_weights(const WeightSource& ws, const KernelInfo& kernel,
                                                         int64_t positions, bool fallback, int64_t batch) {
  const ModelConfig& c = ws.config();
  Engine::check_kernel(c, kernel, fallback);  // a kernel that cannot run these shapes fails before loading
  const DeviceWeights::Plan w = DeviceWeights::plan(ws);
  const MemoryUse e = Engine::plan(c, kernel, positions, external_lora_rank(ws), batch);
  // Conservative by the loading buffers, which are freed before the engine allocates.
  const uint64_t need = w.weights_bytes + w.load_bytes + e.total_bytes;
  check_free_memory(need, [&] {
    return fmt::format(
        "not enough GPU memory for {} at {} positions: need {} (weights {}, KV cache {}, scratch {}, loading "
        "buffers {})",
        c.name, positions, gb(need), gb(w.weights_bytes), gb(e.kv_cache_bytes), gb(e.scratch_bytes),
        gb(w.load_bytes));
  });
  return std::make_shared<const DeviceWeights>(ws, weight_layout(c, kernel));
}

// ------------------------------------------------------------------------ engine

MemoryUse Engine::plan(const ModelConfig& c, const KernelInfo& kernel, int64_t positions, int64_t lora_rank,
                       int64_t batch) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, L = c.num_hidden_layers;
  const int64_t qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
  const ScratchDims d = scratch_dims(c, kernel);
  // Batch B: the cache, the activations, the attention partials and the step state B-fold;
  // at B > 1 also the batched step's own scratch (the constructor allocates the same).
  const uint64_t B = static_cast<uint64_t>(std::max<int64_t>(batch, 1));
  const BatchNeeds n = B > 1 ? batch_needs(planned_ops(c, kernel), batch, lora_rank > 0) : BatchNeeds{};
  const int64_t dequant = std::max(d.impl == LinearImpl::dequant_cublas ? d.largest : 0, n.dequant);
  MemoryUse m;
  m.kv_cache_bytes = 2ull * L * positions * kvd * 2 * B;
  m.scratch_bytes =
      B * (4 * H + 4 * (qd + 2 * kvd) + 2 * qd + 2 * I + 4 * V + 2 * d.max_in + 4 * 2 * I) +
      4ull * positions * hd + B * 4ull * c.num_attention_heads * attention_splits(positions) * (hd + 2) +
      B * 4 * c.num_key_value_heads + 4 * (B + 2 + B * positions) + 8 * B + 8 * (2 * L + 1) * kNormSlots +
      2ull * dequant + (d.uses_cublas ? kCublasWorkspace : 2 * H) +
      (n.cublas && !d.uses_cublas ? kCublasWorkspace : 0) + n.skinny_workspace +
      (B > 1 ? 4ull * B * 3 * lora_rank : 0) + lora_scratch_bytes(c, lora_rank);
  m.total_bytes = m.kv_cache_bytes + m.scratch_bytes;
  return m;
}

std::vector<std::string> Engine::fallbacks(const ModelConfig& c, const KernelInfo& kernel) {
  return site_impls(c, kernel, true).fallbacks;
}

void Engine::check_kernel(const ModelConfig& c, const KernelInfo& kernel, bool fallback) {
  if (c.head_dim % 8 != 0 || c.head_dim > 256)
    fail(
        "{}: head_dim {} is not supported by the CUDA attention (a multiple of 8 up to 256; --backend cpu "
        "runs it)",
        c.name, c.head_dim);
  const SiteImpls impls = site_impls(c, kernel, fallback);
  const WeightLayout layout = weight_layout(c, kernel);
  const Shapes sh = shapes(c);
  auto check = [&](DeviceMatrix m, LinearImpl li, bool repacked) {
    repacked = repacked && li == LinearImpl::gemv_fast;
    m.int4_repacked = repacked && m.scheme == Scheme::int4;
    const char* why = nullptr;
    if ((li == LinearImpl::gemv_fast || li == LinearImpl::gemv_naive) &&
        !gemv_supports(m, li == LinearImpl::gemv_fast ? GemvVariant::fast : GemvVariant::naive, &why))
      fail("kernel {} cannot run {} [{} x {}]: {}", kernel.name, c.name, m.rows, m.cols, why);
    if (li == LinearImpl::cublas && m.scheme != Scheme::fp16)
      fail("kernel {} needs fp16 weights", kernel.name);
  };
  for (int i = 0; i < 4; ++i) check(sh.block[i], impls.block[i], layout.block_int4_repacked);
  check(sh.tied_head ? sh.embedding : sh.head, impls.head, layout.head_int4_repacked);
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

Engine::Engine(std::shared_ptr<const DeviceWeights> weights, const KernelInfo& kernel, int64_t positions,
               bool fallback, int64_t batch)
    : c_(non_null(weights).config()),
      positions_(positions),
      batch_(batch),
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
  if (w.layout() != weight_layout(c_, kernel))
    fail("kernel {} reads the {} weight layout, these weights are in the {} layout", kernel.name,
         weight_layout(c_, kernel).name(), w.layout().name());
  check_kernel(c_, kernel, fallback);
  if (batch < 1 || batch > kMaxBatch)
    fail("a batch of {} sequences: the engine runs 1 to {}", batch, kMaxBatch);
  const int64_t B = batch;
  const ScratchDims dims = scratch_dims(c_, kernel);
  const SiteImpls impls = site_impls(c_, kernel, fallback);
  const LinearImpl impl = dims.impl, head_impl = impls.head;

  // --- the memory plan: the weights are resident already, so free memory need only hold the
  // engine's own part (counting the weights again would refuse runs that fit).
  const MemoryUse own = plan(c_, kernel, positions, w.lora_rank(), B);
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

  // --- the layers as the step runs them: the shared weights with this engine's kernel choice
  layers_.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    const DeviceWeights::Layer& src = w.layers()[l];
    DeviceLayer& d = layers_[l];
    d.attn_norm = src.attn_norm;
    d.mlp_norm = src.mlp_norm;
    d.q_norm = src.q_norm;
    d.k_norm = src.k_norm;
    d.qkv_bias = src.qkv_bias;
    d.qkv = {src.qkv, impls.block[0]};
    d.o = {src.o, impls.block[1]};
    d.gate_up = {src.gate_up, impls.block[2]};
    d.down = {src.down, impls.block[3]};
    // Sequence s's rows at s * positions: the stride attention derives from rope_positions,
    // which is positions_ too (one rope table of the cache's length).
    d.k_cache = static_cast<__half*>(alloc(B * positions * kvd * 2));
    d.v_cache = static_cast<__half*>(alloc(B * positions * kvd * 2));
  }
  embedding_ = w.embedding();
  lm_head_ = {w.lm_head(), head_impl};
  final_norm_ = w.final_norm();

  // --- activations and state
  Buffers& b = *buf_;
  b.resid = static_cast<float*>(alloc(4 * H * B));
  b.qkv = static_cast<float*>(alloc(4 * (qd + 2 * kvd) * B));
  b.attn = static_cast<__half*>(alloc(2 * qd * B));
  b.act = static_cast<__half*>(alloc(2 * I * B));
  b.logits = static_cast<float*>(alloc(4 * V * B));
  b.xnorm = static_cast<__half*>(alloc(2 * dims.max_in * B));
  b.gate_up = static_cast<float*>(alloc(4 * 2 * I * B));
  const BatchNeeds needs =
      B > 1 ? batch_needs({layers_[0].qkv, layers_[0].o, layers_[0].gate_up, layers_[0].down, lm_head_}, B,
                          w.lora_rank() > 0)
            : BatchNeeds{};
  if (impl == LinearImpl::dequant_cublas || head_impl == LinearImpl::dequant_cublas || needs.dequant > 0)
    b.dequant = static_cast<__half*>(alloc(2 * std::max(dims.largest, needs.dequant)));
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
  // Only where the blocks' linears are GEMVs (as the statistics
  // below): the cuBLAS paths' epilogue does not write it, and their RMSNorm kernel reads the
  // float stream. Engine::plan counts it on the same condition.
  if (!dims.uses_cublas) b.resid_h = static_cast<__half*>(alloc(2 * H));
  // token [B], then pos and first_pos: set_inputs() writes the tokens and pos in one copy.
  b.state = static_cast<int32_t*>(alloc(4 * (B + 2)));
  CUDA_CHECK(cudaMemsetAsync(b.state, 0, 4 * (B + 2), stream_));
  b.tokens_out = static_cast<int32_t*>(alloc(4 * positions * B));
  b.key = static_cast<unsigned long long*>(alloc(8 * B));
  CUDA_CHECK(cudaMemsetAsync(b.key, 0, 8 * B, stream_));
  // RMSNorm statistics flow from kernel to kernel only when every linear of the blocks is one
  // of our GEMVs (they write and read them); the cuBLAS paths normalize in a kernel of their own.
  const int stats_count = static_cast<int>((2 * L + 1) * kNormSlots);
  b.norm_stats = static_cast<unsigned long long*>(alloc(8ull * stats_count));
  CUDA_CHECK(cudaMemsetAsync(b.norm_stats, 0, 8ull * stats_count, stream_));
  norm_stats_ = !dims.uses_cublas;  // as resid_h above, and Engine::plan
  step_state_ =
      StepState{b.state, b.state + B, b.state + B + 1, b.tokens_out, b.key, b.norm_stats, stats_count};
  batch_state_ = BatchState{b.state, b.state + B, b.state + B + 1, b.tokens_out, b.key, B, positions};
  if (needs.skinny_workspace > 0) {
    b.skinny_workspace = alloc(needs.skinny_workspace);
    CUDA_CHECK(cudaMemsetAsync(b.skinny_workspace, 0, needs.skinny_workspace, stream_));
  }
  if (B > 1 && w.lora_rank() > 0) b.lora_rows = static_cast<float*>(alloc(4ull * B * 3 * w.lora_rank()));
  if (dims.uses_cublas || head_impl == LinearImpl::cublas || head_impl == LinearImpl::dequant_cublas ||
      needs.cublas) {
    CUBLAS_CHECK(cublasCreate(&cublas_));
    CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    b.cublas_workspace = alloc(kCublasWorkspace);
    CUBLAS_CHECK(cublasSetWorkspace(cublas_, b.cublas_workspace, kCublasWorkspace));
  }
  setup_lora();
  if (B > 1) tune_skinny_shapes();
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

void Engine::set_input(int64_t pos, int32_t token) {
  if (batch_ != 1) fail("set_input at a batch of {}: set_inputs() gives every sequence its token", batch_);
  const int32_t v[2] = {token, static_cast<int32_t>(pos)};
  CUDA_CHECK(cudaMemcpyAsync(buf_->state, v, sizeof v, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // `v` lives on this stack frame
}

void Engine::set_first_position(int64_t pos) {
  const int32_t v = static_cast<int32_t>(pos);
  CUDA_CHECK(cudaMemcpyAsync(step_state_.first_pos, &v, sizeof v, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void Engine::run_linear(const LinearOp& op, const GemvInput& in, const GemvOutput& out) {
  if (op.impl == LinearImpl::gemv_fast || op.impl == LinearImpl::gemv_naive) {
    gemv(op.m, in, out, op.impl == LinearImpl::gemv_fast ? GemvVariant::fast : GemvVariant::naive, stream_);
    return;
  }
  // cuBLAS: the norm, the epilogue and (dequant-cublas) the fp16 copy are separate kernels.
  const __half* x = in.x;
  if (in.resid) {
    rmsnorm(in.resid, in.norm_w, in.eps, op.m.cols, buf_->xnorm, stream_);
    x = buf_->xnorm;
  }
  const __half* w = static_cast<const __half*>(op.m.qweight);
  if (op.impl == LinearImpl::dequant_cublas) {
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
  if (batch_ > 1)
    enqueue_step_batch();
  else
    enqueue_step_single();
#ifdef DB_DEV
  enqueue_dev_delay(stream_);  // lab builds: DECODEBENCH_DEV_DELAY_US, a known slowdown (dev_delay.cuh)
#endif
}

void Engine::enqueue_step_single() {
  Buffers& b = *buf_;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  // The statistics of RMSNorm site s: 2l before layer l's attention, 2l + 1 before its MLP,
  // 2L before the lm_head; each is written by the kernel that last writes resid before it.
  auto stats = [&](int64_t site) { return norm_stats_ ? b.norm_stats + site * kNormSlots : nullptr; };
  embed(static_cast<const __half*>(embedding_.qweight), c_.hidden_size, step_state_, b.resid, stats(0),
        stream_, b.resid_h);
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    const DeviceLayer& d = layers_[l];
    const float* qkv_delta = lora_delta(l, LoraSite::qkv, b.resid, b.resid_h, d.attn_norm,
                                        stats(2 * l));  // external LoRA, else null
    run_linear(d.qkv, {nullptr, b.resid, d.attn_norm, eps, stats(2 * l), b.resid_h},
               with_addend({Epilogue::store, b.qkv}, qkv_delta));

    AttentionArgs a = attention_args(d, step_state_.pos);
    a.early_launch = d.o.impl == LinearImpl::gemv_fast && d.o.m.scheme == Scheme::int4;
    attention(a, stream_);

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

std::vector<float> Engine::logits() {
  std::vector<float> v(static_cast<size_t>(c_.vocab_size));
  CUDA_CHECK(cudaMemcpyAsync(v.data(), buf_->logits, 4 * v.size(), cudaMemcpyDeviceToHost, stream_));
  synchronize();
  return v;
}

std::vector<int32_t> Engine::tokens(int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  CUDA_CHECK(cudaMemcpyAsync(v.data(), buf_->tokens_out, 4 * v.size(), cudaMemcpyDeviceToHost, stream_));
  synchronize();
  return v;
}

int32_t Engine::next_token() {
  int32_t t = 0;
  CUDA_CHECK(cudaMemcpyAsync(&t, buf_->state, 4, cudaMemcpyDeviceToHost, stream_));
  synchronize();
  return t;
}

}  // namespace db::cuda

// The model's weights on the device (see src/cuda/device_weights.cuh).
#include "device_weights.cuh"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "common.cuh"
#include "decodebench/linear_plan.h"
#include "engine_lora.cuh"
#include "weights.cuh"

namespace db::cuda {

std::string gb(uint64_t b) {
  return fmt::format("{:.2f} GB", b / 1e9);
}

void check_free_memory(uint64_t need, const std::function<std::string()>& message) {
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (need > free_b) fail("{}, {} free of {}", message(), gb(free_b), gb(total_b));
}

namespace {

constexpr size_t kStageBytes = size_t{64} << 20;

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

// Fills dst's rows (through `map`) from a tensor's origin: synthetic weights generated and
// quantized on the device, a dense file's rows staged and quantized there, a quantized file's
// rows copied as they are (a GPTQ/AWQ/FP8 checkpoint's linear converted on the host first).
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
      if (o.packing != Packing::canonical) {
        // A GPTQ/AWQ/FP8 checkpoint's linear: converted on the host (one matrix at a time, never
        // merged with an adapter here: the merge, where there is one, reads this as its base),
        // then copied as a decodebench file's canonical tensors are (the stager copies from host
        // memory before it returns).
        const QuantMatrix m = ws.checkpoint_rows(o);
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

}  // namespace

DeviceWeights::Plan DeviceWeights::plan(const WeightSource& ws, const WeightLayout& layout) {
  const ModelConfig& c = ws.config();
  uint64_t repack = 0;  // the largest matrix's mixed-wgmma arrays, made beside its canonical ones
  auto bytes = [&](const MatrixShape& m, MatrixKind k) {
    const MatrixLayout l = layout.matrices[static_cast<int>(k)];
    if (l != MatrixLayout::mixed_wgmma)
      return device_matrix_bytes(device_matrix(m, MatrixLayout::canonical)).total();
    const uint64_t mixed = device_matrix_bytes(device_matrix(m, l)).total();
    repack = std::max(repack, mixed);
    return mixed;
  };
  uint64_t per_layer = 2 * c.hidden_size * 2 + (c.arch == Arch::qwen3 ? 2 * c.head_dim * 2 : 0);  // norms
  if (c.arch == Arch::qwen2) per_layer += qkv_bias_size(c) * 2;  // fp16 q/k/v biases
  for (MatrixKind k : {MatrixKind::qkv, MatrixKind::o, MatrixKind::gate_up, MatrixKind::down})
    per_layer += bytes(matrix_shape(c, k), k);
  const LoraBytes lora = lora_bytes(ws);
  Plan p;
  p.weights_bytes = per_layer * c.num_hidden_layers +
                    device_matrix_bytes(device_matrix(embedding_shape(c), MatrixLayout::canonical)).total() +
                    (lm_head_tied(c) ? 0 : bytes(matrix_shape(c, MatrixKind::lm_head), MatrixKind::lm_head)) +
                    c.hidden_size * 2 + lora.weights;
  p.load_bytes = kStageBytes + lora.load + repack;
  return p;
}

DeviceWeights::DeviceWeights(const WeightSource& ws, const WeightLayout& layout)
    : c_(ws.config()), layout_(layout) {
  const auto t0 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaGetDevice(&device_));
  const Plan p = plan(ws, layout);
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
  embedding_ = device_matrix(embedding_shape(c_), MatrixLayout::canonical);
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
    const std::pair<DeviceMatrix*, MatrixKind> ms[] = {{&d.qkv, MatrixKind::qkv},
                                                       {&d.o, MatrixKind::o},
                                                       {&d.gate_up, MatrixKind::gate_up},
                                                       {&d.down, MatrixKind::down}};
    for (const auto& [m, kind] : ms) {
      *m = device_matrix(matrix_shape(c_, kind), MatrixLayout::canonical);
      alloc_matrix(*m);
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
  const bool tied = lm_head_tied(c_);
  if (tied) {
    lm_head_ = embedding_;
  } else {
    lm_head_ = device_matrix(matrix_shape(c_, MatrixKind::lm_head), MatrixLayout::canonical);
    alloc_matrix(lm_head_);
    fill_matrix(ws, ws.lm_head(), lm_head_, {}, stager, s);
  }
  // Each kernel reads its own layout (the linear plan's): int4 matrices the fast GEMV runs are
  // repacked, into the tensor-core dot's fragment layout where the plan prefers it; int4 and
  // int8 matrices the mixed-input GEMM runs go into its layout in new arrays, the canonical ones
  // freed once the repack has run (so that one matrix at a time has both).
  auto free_allocation = [&](void* p) {
    if (!p) return;
    allocations_.erase(std::find(allocations_.begin(), allocations_.end(), p));
    CUDA_CHECK(cudaFree(p));
  };
  auto repack = [&](DeviceMatrix& m, MatrixKind kind) {
    const MatrixLayout l = layout_.matrices[static_cast<int>(kind)];
    if (l == MatrixLayout::mixed_wgmma) {
      const DeviceMatrix canonical = m;
      const MatrixBytes b = device_matrix_bytes(device_matrix(shape_of(m), l));
      repack_mixed(m, alloc(b.weights), alloc(b.scales), s);
      CUDA_CHECK(cudaStreamSynchronize(s));
      free_allocation(canonical.qweight);
      free_allocation(canonical.scales);
      free_allocation(canonical.zeros);
    } else if (l != MatrixLayout::canonical) {
      repack_int4(m, s, l == MatrixLayout::int4_fragments);
    }
  };
  for (Layer& d : layers_) {
    repack(d.qkv, MatrixKind::qkv);
    repack(d.o, MatrixKind::o);
    repack(d.gate_up, MatrixKind::gate_up);
    repack(d.down, MatrixKind::down);
  }
  if (!tied) repack(lm_head_, MatrixKind::lm_head);
  lora_groups_ = upload_external_lora(ws, alloc, s);
  lora_rank_ = lora_groups_.empty() ? 0 : ws.adapter()->rank;
  CUDA_CHECK(cudaStreamSynchronize(s));  // before the stager, the merger and the stream go
}

}  // namespace db::cuda

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

constexpr uint64_t kStagingAlign = 256;

uint64_t aligned(uint64_t n) {
  return (n + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
}

// The layouts made from a canonical staging copy, not in place: the tiles layouts and the
// mixed-wgmma layout (their padded rows and meta take more bytes than the canonical arrays).
bool is_staged(MatrixLayout l) {
  return l == MatrixLayout::int4_tiles || l == MatrixLayout::int8_tiles || l == MatrixLayout::fp16_tiles ||
         l == MatrixLayout::mixed_wgmma;
}

// The embedding's layout: canonical, or the fp16 tiles where it is the lm_head (tied) and the
// plan runs the lm_head on the tiles GEMV (the gather reads the tiles: embed_rows).
MatrixLayout embedding_layout(const ModelConfig& c, const WeightLayout& layout) {
  const MatrixLayout head = layout.matrices[static_cast<int>(MatrixKind::lm_head)];
  return lm_head_tied(c) && head == MatrixLayout::fp16_tiles ? head : MatrixLayout::canonical;
}

// The largest canonical matrix of the kinds `layout` puts in a staged layout (a tied lm_head:
// the embedding): the staging copy they are filled into before their repack (0: none).
uint64_t staging_bytes(const ModelConfig& c, const WeightLayout& layout) {
  uint64_t n = 0;
  for (MatrixKind k : kAllMatrixKinds)
    if (is_staged(layout.matrices[static_cast<int>(k)]))
      n = std::max(n,
                   device_matrix_bytes(device_matrix(matrix_shape(c, k), MatrixLayout::canonical)).total());
  return n > 0 ? n + 2 * kStagingAlign : 0;  // its arrays each start aligned
}

}  // namespace

DeviceWeights::Plan DeviceWeights::plan(const WeightSource& ws, const WeightLayout& layout) {
  const ModelConfig& c = ws.config();
  auto bytes = [&](const MatrixShape& m, MatrixKind k) {
    return device_matrix_bytes(device_matrix(m, layout.matrices[static_cast<int>(k)])).total();
  };
  uint64_t per_layer = 2 * c.hidden_size * 2 + (c.arch == Arch::qwen3 ? 2 * c.head_dim * 2 : 0);  // norms
  if (c.arch == Arch::qwen2) per_layer += qkv_bias_size(c) * 2;  // fp16 q/k/v biases
  for (MatrixKind k : {MatrixKind::qkv, MatrixKind::o, MatrixKind::gate_up, MatrixKind::down})
    per_layer += bytes(matrix_shape(c, k), k);
  const LoraBytes lora = lora_bytes(ws);
  const uint64_t embedding =
      device_matrix_bytes(device_matrix(embedding_shape(c), embedding_layout(c, layout))).total();
  Plan p;
  p.weights_bytes = per_layer * c.num_hidden_layers + embedding +
                    (lm_head_tied(c) ? 0 : bytes(matrix_shape(c, MatrixKind::lm_head), MatrixKind::lm_head)) +
                    c.hidden_size * 2 + lora.weights;
  p.load_bytes = kStageBytes + lora.load + staging_bytes(c, layout);
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

  // The tiles and mixed-wgmma layouts are not made in place (is_staged): a matrix headed there is filled into
  // a canonical staging copy, one buffer for every such matrix in turn (stream order keeps each repack's
  // reads before the next fill's writes), and repacked from it.
  struct Staging {
    void* p = nullptr;
    ~Staging() {
      if (p) cudaFree(p);
    }
  } staging;
  if (const uint64_t n = staging_bytes(c_, layout_); n > 0) CUDA_CHECK(cudaMalloc(&staging.p, n));
  // The matrix a fill writes: `m` itself, or for a staged layout the staging copy of its shape.
  auto fill_target = [&](const DeviceMatrix& m) {
    if (!is_staged(layout_of(m))) return m;
    DeviceMatrix c = device_matrix(shape_of(m), MatrixLayout::canonical);
    const MatrixBytes b = device_matrix_bytes(c);
    uint8_t* p = static_cast<uint8_t*>(staging.p);
    c.qweight = p;
    c.scales = reinterpret_cast<__half*>(p + aligned(b.weights));
    c.zeros = b.zeros ? p + aligned(b.weights) + aligned(b.scales) : nullptr;
    return c;
  };
  // After its fill: the staging copy of a staged matrix into the matrix.
  auto finish_target = [&](const DeviceMatrix& target, const DeviceMatrix& m) {
    if (m.int4_tiles) repack_int4_tiles(target, m, s);
    if (m.int8_tiles) repack_int8_tiles(target, m, s);
    if (m.fp16_tiles) repack_fp16_tiles(target, m, s);
    if (m.mixed_wgmma) {
      DeviceMatrix c = target;
      repack_mixed(c, m.qweight, m.scales, s);
    }
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
  embedding_ = device_matrix(embedding_shape(c_), embedding_layout(c_, layout_));
  alloc_matrix(embedding_);
  const DeviceMatrix embedding = fill_target(embedding_);
  fill_matrix(ws, ws.embedding(), embedding, {}, stager, s);
  finish_target(embedding, embedding_);
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
      const MatrixLayout l = layout_.matrices[static_cast<int>(kind)];
      *m = device_matrix(matrix_shape(c_, kind), is_staged(l) ? l : MatrixLayout::canonical);
      alloc_matrix(*m);
    }
    const DeviceMatrix qkv = fill_target(d.qkv);
    fill_linear(ws.linear(l, Linear::q), qkv, {0, 1});
    fill_linear(ws.linear(l, Linear::k), qkv, {qd, 1});
    fill_linear(ws.linear(l, Linear::v), qkv, {qd + kvd, 1});
    finish_target(qkv, d.qkv);
    const DeviceMatrix o = fill_target(d.o);
    fill_linear(ws.linear(l, Linear::o), o, {0, 1});
    finish_target(o, d.o);
    const DeviceMatrix gate_up = fill_target(d.gate_up);
    fill_linear(ws.linear(l, Linear::gate), gate_up, {0, 2});
    fill_linear(ws.linear(l, Linear::up), gate_up, {1, 2});
    finish_target(gate_up, d.gate_up);
    const DeviceMatrix down = fill_target(d.down);
    fill_linear(ws.linear(l, Linear::down), down, {0, 1});
    finish_target(down, d.down);
  }
  final_norm_ = vec(ws.vector(kFinalNormName, H));
  const bool tied = lm_head_tied(c_);
  if (tied) {
    lm_head_ = embedding_;
  } else {
    const MatrixLayout l = layout_.matrices[static_cast<int>(MatrixKind::lm_head)];
    lm_head_ =
        device_matrix(matrix_shape(c_, MatrixKind::lm_head), is_staged(l) ? l : MatrixLayout::canonical);
    alloc_matrix(lm_head_);
    const DeviceMatrix head = fill_target(lm_head_);
    fill_matrix(ws, ws.lm_head(), head, {}, stager, s);
    finish_target(head, lm_head_);
  }
  // Each kernel reads its own layout (the linear plan's): int4 matrices the fast GEMV runs are
  // repacked in place, into the tensor-core dot's fragment layout where the plan prefers it
  // (the tiles and mixed-wgmma layouts are made above).
  auto repack = [&](DeviceMatrix& m, MatrixKind kind) {
    const MatrixLayout l = layout_.matrices[static_cast<int>(kind)];
    if (l == MatrixLayout::int4_nibbles || l == MatrixLayout::int4_fragments)
      repack_int4(m, s, l == MatrixLayout::int4_fragments);
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

// A kernel timeline of any CUDA process, for the decode step under CUDA graphs and
// programmatic dependent launch, where ncu's serialized replay hides how kernels overlap.
// CUPTI's concurrent-kernel activity records each kernel's start and end on the GPU clock
// without serializing; the driver loads this library before the program's first CUDA call:
//
//   DB_TRACE_OUT=trace.csv CUDA_INJECTION64_PATH=build-gpu/libdecodebench_kernel_trace.so \
//     build-gpu/decodebench --model 8b-int8 --graph on --tokens 128 --warmup 0 --repeat 1
//   scripts/trace_step.py trace.csv
//
// One CSV row per kernel: start_ns, end_ns (GPU timestamps), grid, block, registers, static
// and dynamic shared memory, the shared memory the SM was configured with while it ran, the
// graph node, and the (mangled) name.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace {

constexpr size_t kBufferBytes = 16u << 20;
std::FILE* out = nullptr;
std::mutex mu;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "kernel_trace: %s: %s\n", what, msg ? msg : "unknown CUPTI error");
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(mu);
  CUpti_Activity* record = nullptr;
  while (out && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    std::fprintf(out, "%llu,%llu,%d,%d,%d,%u,%d,%d,%u,%llu,%s\n", static_cast<unsigned long long>(k->start),
                 static_cast<unsigned long long>(k->end), k->gridX, k->gridY, k->blockX,
                 k->registersPerThread, k->staticSharedMemory, k->dynamicSharedMemory,
                 k->sharedMemoryExecuted, static_cast<unsigned long long>(k->graphNodeId),
                 k->name ? k->name : "?");
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS && dropped)
    std::fprintf(stderr, "kernel_trace: %zu records dropped\n", dropped);
  std::free(buffer);
}

void finish() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(mu);
  if (out) std::fclose(out);
  out = nullptr;
}

}  // namespace

// The driver calls this when CUDA_INJECTION64_PATH names this library.
extern "C" int InitializeInjection() {
  const char* path = std::getenv("DB_TRACE_OUT");
  out = std::fopen(path ? path : "kernel_trace.csv", "w");
  if (!out) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", path ? path : "kernel_trace.csv");
    return 0;
  }
  std::fprintf(out,
               "start_ns,end_ns,grid_x,grid_y,block_x,registers,static_smem,dynamic_smem,smem_executed,"
               "graph_node,name\n");
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register callbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable concurrent kernel records");
  std::atexit(finish);
  return 1;
}

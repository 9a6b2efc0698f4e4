// How much host memory this process can still take: the least of the kernel's MemAvailable,
// the room under every cgroup memory limit above it (v1 and v2) and the address-space limit.
// A loader that is about to allocate a size computed from input compares its plan with this
// (require_host_memory) and refuses with both numbers, rather than being killed by the OOM
// killer without a message.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace db {

struct HostMemory {
  uint64_t available = UINT64_MAX;  // bytes; UINT64_MAX when nothing could be read
  std::string limit;                // what sets it: "MemAvailable", "cgroup memory limit", ...
};

HostMemory host_memory();

// What one piece of work will hold in host memory at its peak, part by part. Every verb
// that allocates in proportion to a model (the CPU reference, an adapter's A and B,
// gen-weights and quantize) states its plan and checks it with require_host_memory before
// allocating any of it.
struct HostPlan {
  struct Part {
    std::string name;  // "weights", "KV cache"
    uint64_t bytes = 0;
    std::string note;  // after the figure: " for 4096 positions"
  };
  std::string what;  // "the CPU reference of 8b-int4"
  std::vector<Part> parts;
  uint64_t total() const;  // saturates at UINT64_MAX
};

// A plan above host_memory() is a db::Error naming both, part by part: "not enough host
// memory for WHAT: need 12.50 GB (weights 8.00, KV cache 4.00 for 4096 positions, scratch
// 0.50), 6.44 GB available (cgroup memory limit)".
void require_host_memory(const HostPlan& plan);

// "1.50 GB" (decimal units, as the result summaries print bytes).
std::string format_bytes(uint64_t bytes);

}  // namespace db

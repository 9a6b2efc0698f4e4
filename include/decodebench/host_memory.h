// How much host memory this process can still take: the least of the kernel's MemAvailable,
// the room under every cgroup memory limit above it (v1 and v2) and the address-space limit.
// A loader that is about to allocate a size computed from input compares it with this and
// refuses with both numbers, rather than being killed by the OOM killer without a message.
#pragma once

#include <cstdint>
#include <string>

namespace db {

struct HostMemory {
  uint64_t available = UINT64_MAX;  // bytes; UINT64_MAX when nothing could be read
  std::string limit;                // what sets it: "MemAvailable", "cgroup memory limit", ...
};

HostMemory host_memory();

// "1.50 GB" (decimal units, as the result summaries print bytes).
std::string format_bytes(uint64_t bytes);

}  // namespace db

// Host memory a run may still take: the smaller of what the kernel reports available and
// what the process's cgroup allows, so a run inside a container limit is refused with a
// message instead of being killed by the OOM killer.
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "decodebench/cpu_reference.h"

namespace db {
namespace {

constexpr uint64_t kUnknown = std::numeric_limits<uint64_t>::max();

// The first number in a small kernel file; kUnknown where it is absent or "max".
uint64_t read_number(const char* path) {
  std::ifstream in(path);
  std::string s;
  if (!(in >> s) || s == "max") return kUnknown;
  try {
    return std::stoull(s);
  } catch (const std::exception&) {
    return kUnknown;
  }
}

uint64_t meminfo_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream ls(line.substr(13));
    uint64_t kib = 0;
    if (ls >> kib) return kib * 1024;
  }
  return kUnknown;
}

}  // namespace

HostMemory host_memory_available() {
  HostMemory m{meminfo_available(), "MemAvailable"};
  // cgroup v2, then v1: the limit less what the group already uses.
  const std::pair<const char*, const char*> groups[] = {
      {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
  for (const auto& [limit_path, usage_path] : groups) {
    const uint64_t limit = read_number(limit_path), usage = read_number(usage_path);
    if (limit == kUnknown || usage == kUnknown) continue;
    const uint64_t left = limit > usage ? limit - usage : 0;
    if (left < m.bytes) m = {left, "the cgroup memory limit"};
    break;
  }
  return m;
}

}  // namespace db

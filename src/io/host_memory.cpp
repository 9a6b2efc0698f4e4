// Host memory still available to this process (include/decodebench/host_memory.h).
#include "decodebench/host_memory.h"

#include "decodebench/error.h"

#include <sys/resource.h>

#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <sstream>
#include <string_view>

namespace db {
namespace {

// The first whitespace-separated number of a small /proc or /sys file; false when absent.
bool read_number(const std::string& path, uint64_t* out) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word)) return false;
  const auto [p, ec] = std::from_chars(word.data(), word.data() + word.size(), *out);
  return ec == std::errc() && p == word.data() + word.size();
}

// "Key:   123 kB" in /proc/meminfo or /proc/self/status, in bytes.
bool read_kb_field(const std::string& path, std::string_view key, uint64_t* out) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0 || line.size() <= key.size() || line[key.size()] != ':')
      continue;
    std::istringstream fields(line.substr(key.size() + 1));
    uint64_t kb = 0;
    if (!(fields >> kb)) return false;
    *out = kb * 1024;
    return true;
  }
  return false;
}

void lower(HostMemory& m, uint64_t available, const char* why) {
  if (available < m.available) {
    m.available = available;
    m.limit = why;
  }
}

// Walks from this process's cgroup up to the hierarchy's root: every level's limit counts.
void cgroup_limits(HostMemory& m) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // v1: "4:memory:/a/b", v2: "0::/a/b"
    const size_t c1 = line.find(':'), c2 = line.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos) continue;
    const std::string controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string rel = line.substr(c2 + 1);
    const bool v2 = line.compare(0, c1, "0") == 0 && controllers.empty();
    const bool v1 = controllers.find("memory") != std::string::npos;
    if (!v1 && !v2) continue;
    const std::string root = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    for (;;) {
      const std::string dir = root + (rel == "/" ? "" : rel);
      uint64_t limit = 0, usage = 0;
      const bool has =
          v2 ? read_number(dir + "/memory.max", &limit) && read_number(dir + "/memory.current", &usage)
             : read_number(dir + "/memory.limit_in_bytes", &limit) &&
                   read_number(dir + "/memory.usage_in_bytes", &usage);
      if (has && limit < (uint64_t{1} << 62))
        lower(m, limit > usage ? limit - usage : 0, "cgroup memory limit");
      if (rel.empty() || rel == "/") break;
      const size_t slash = rel.find_last_of('/');
      rel = slash == 0 || slash == std::string::npos ? "/" : rel.substr(0, slash);
    }
  }
}

}  // namespace

HostMemory host_memory() {
  HostMemory m;
  uint64_t v = 0;
  if (read_kb_field("/proc/meminfo", "MemAvailable", &v)) lower(m, v, "MemAvailable");
  cgroup_limits(m);
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    uint64_t used = 0;
    read_kb_field("/proc/self/status", "VmSize", &used);
    lower(m, rl.rlim_cur > used ? rl.rlim_cur - used : 0, "address-space limit (ulimit -v)");
  }
  return m;
}

uint64_t HostPlan::total() const {
  uint64_t t = 0;
  for (const Part& p : parts) t = p.bytes > UINT64_MAX - t ? UINT64_MAX : t + p.bytes;
  return t;
}

void require_host_memory(const HostPlan& plan) {
  const HostMemory have = host_memory();
  const uint64_t need = plan.total();
  if (need <= have.available) return;
  std::string parts;
  for (const HostPlan::Part& p : plan.parts)
    parts += fmt::format("{}{} {:.2f}{}", parts.empty() ? "" : ", ", p.name, p.bytes / 1e9, p.note);
  fail("not enough host memory for {}: need {:.2f} GB ({}), {:.2f} GB available ({})", plan.what, need / 1e9,
       parts, have.available / 1e9, have.limit);
}

std::string format_bytes(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.2f} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.2f} KB", b / 1e3);
  return fmt::format("{} bytes", bytes);
}

}  // namespace db

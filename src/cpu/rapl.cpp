// RAPL's energy counters through the kernel's powercap interface (energy.h): the CPU
// backend's energy source.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>

#include <fmt/format.h>

#include "decodebench/energy.h"

namespace db {
namespace {

namespace fs = std::filesystem;

// The text of a small sysfs file, or false with `error` ("cannot read PATH: Permission
// denied"). open/read rather than a stream: errno says why.
bool read_small_file(const std::string& path, std::string& text, std::string& error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = fmt::format("cannot read {}: {}", path, std::strerror(errno));
    return false;
  }
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  const int read_errno = errno;
  ::close(fd);
  if (n < 0) {
    error = fmt::format("cannot read {}: {}", path, std::strerror(read_errno));
    return false;
  }
  text.assign(buf, static_cast<size_t>(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return true;
}

bool read_u64(const std::string& path, uint64_t& value, std::string& error) {
  std::string text;
  if (!read_small_file(path, text, error)) return false;
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 19) {
    error = fmt::format("cannot read {}: \"{}\" is not a count of microjoules", path, text.substr(0, 40));
    return false;
  }
  value = std::stoull(text);
  return true;
}

struct Zone {
  std::string dir;   // root/intel-rapl:N[:M]
  std::string name;  // package-0, dram
  uint64_t range = 0;
  uint64_t last = 0;
  uint64_t total = 0;  // microjoules since the source was made, unwrapped
};

class RaplSource final : public EnergySource {
 public:
  explicit RaplSource(std::vector<Zone> zones) : zones_(std::move(zones)) {}
  std::string name() const override {
    std::string s = "rapl";
    for (size_t i = 0; i < zones_.size(); ++i) s += (i ? " + " : " ") + zones_[i].name;
    return s;
  }
  std::optional<double> energy_j(std::string& error) override {
    std::lock_guard<std::mutex> lk(mu_);
    uint64_t sum = 0;
    for (Zone& z : zones_) {
      uint64_t now = 0;
      if (!read_u64(z.dir + "/energy_uj", now, error)) return std::nullopt;
      z.total += rapl_delta_uj(z.last, now, z.range);
      z.last = now;
      sum += z.total;
    }
    return static_cast<double>(sum) * 1e-6;
  }
  std::string clocks_unavailable() const override { return "the cpu backend samples no clocks"; }

 private:
  std::mutex mu_;
  std::vector<Zone> zones_;
};

// "intel-rapl:3" -> 3 parts {"intel-rapl", "3"}; "intel-rapl:0:1" -> 3 parts.
std::vector<std::string> split_colons(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t c = s.find(':', start);
    parts.push_back(s.substr(start, c == std::string::npos ? std::string::npos : c - start));
    if (c == std::string::npos) return parts;
    start = c + 1;
  }
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// The zones to count, by directory name: the packages (intel-rapl:N named package-*) and
// the dram subzones under them (intel-rapl:N:M named dram). Not psys, which covers the
// packages again, nor core and uncore, which lie inside a package.
std::vector<std::pair<std::string, std::string>> counted_zones(const std::string& root) {
  std::vector<std::pair<std::string, std::string>> out;  // (dir name, zone name)
  std::error_code ec;
  std::vector<std::string> names;
  for (const fs::directory_entry& d : fs::directory_iterator(root, ec)) names.push_back(d.path().filename());
  std::sort(names.begin(), names.end());
  std::vector<std::string> packages;
  for (const std::string& n : names) {
    const std::vector<std::string> p = split_colons(n);
    if (p.size() != 2 || p[0] != "intel-rapl" || !all_digits(p[1])) continue;
    std::string zone, error;
    if (!read_small_file(root + "/" + n + "/name", zone, error) || zone.rfind("package", 0) != 0) continue;
    out.emplace_back(n, zone);
    packages.push_back(p[1]);
  }
  for (const std::string& n : names) {
    const std::vector<std::string> p = split_colons(n);
    if (p.size() != 3 || p[0] != "intel-rapl" || !all_digits(p[1]) || !all_digits(p[2])) continue;
    if (std::find(packages.begin(), packages.end(), p[1]) == packages.end()) continue;
    std::string zone, error;
    if (read_small_file(root + "/" + n + "/name", zone, error) && zone == "dram") out.emplace_back(n, zone);
  }
  return out;
}

}  // namespace

uint64_t rapl_delta_uj(uint64_t before, uint64_t after, uint64_t range) {
  if (after >= before) return after - before;
  return range >= before ? (range - before) + after : after;  // wrapped past `range` to 0
}

std::unique_ptr<EnergySource> make_rapl_source(const std::string& root, std::string& why) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    why = fmt::format("no {} on this machine: no RAPL energy counter", root);
    return nullptr;
  }
  const auto counted = counted_zones(root);
  if (counted.empty()) {
    why = fmt::format("no RAPL package zone under {}", root);
    return nullptr;
  }
  std::vector<Zone> zones;
  for (const auto& [dir, name] : counted) {
    Zone z;
    z.dir = root + "/" + dir;
    z.name = name;
    std::string error;
    if (!read_u64(z.dir + "/max_energy_range_uj", z.range, error) ||
        !read_u64(z.dir + "/energy_uj", z.last, error)) {
      why = error + (error.find("Permission denied") != std::string::npos
                         ? " (RAPL's energy counters are often readable by root only)"
                         : "");
      return nullptr;
    }
    zones.push_back(std::move(z));
  }
  return std::make_unique<RaplSource>(std::move(zones));
}

std::optional<double> rapl_power_limit_w(const std::string& root) {
  double sum = 0;
  bool any = false;
  for (const auto& [dir, name] : counted_zones(root)) {
    if (name == "dram") continue;
    uint64_t uw = 0;
    std::string error;
    if (!read_u64(root + "/" + dir + "/constraint_0_power_limit_uw", uw, error)) return std::nullopt;
    sum += static_cast<double>(uw) * 1e-6;
    any = true;
  }
  return any ? std::optional<double>(sum) : std::nullopt;
}

}  // namespace db

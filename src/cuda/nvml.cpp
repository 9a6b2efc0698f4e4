// NVML through dlopen (see nvml.h).
#include "nvml.h"

#include <dlfcn.h>

#include <utility>
#include <vector>

namespace db {

struct Nvml::Api {
  void* lib = nullptr;
  using Dev = void*;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*by_pci)(const char*, Dev*) = nullptr;
  int (*clock)(Dev, int, unsigned*) = nullptr;
  int (*max_clock)(Dev, int, unsigned*) = nullptr;
  int (*temperature)(Dev, int, unsigned*) = nullptr;
  int (*power)(Dev, unsigned*) = nullptr;
  int (*power_limit)(Dev, unsigned*) = nullptr;
  int (*reasons)(Dev, unsigned long long*) = nullptr;
  int (*ecc)(Dev, int*, int*) = nullptr;
  int (*driver)(char*, unsigned) = nullptr;
  int (*uuid)(Dev, char*, unsigned) = nullptr;
  int (*bus_width)(Dev, unsigned*) = nullptr;

  template <class F>
  void bind(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(lib, name));
  }
  ~Api() {
    if (shutdown) shutdown();
    if (lib) dlclose(lib);
  }
};

namespace {
constexpr int kClockSm = 1, kClockMem = 2, kTempGpu = 0, kSuccess = 0;
}

std::unique_ptr<Nvml> Nvml::open(const std::string& pci_bus_id) {
  auto api = std::make_unique<Api>();
  api->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api->lib) return nullptr;
  api->bind(api->init, "nvmlInit_v2");
  api->bind(api->shutdown, "nvmlShutdown");
  api->bind(api->by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
  api->bind(api->clock, "nvmlDeviceGetClockInfo");
  api->bind(api->max_clock, "nvmlDeviceGetMaxClockInfo");
  api->bind(api->temperature, "nvmlDeviceGetTemperature");
  api->bind(api->power, "nvmlDeviceGetPowerUsage");
  api->bind(api->power_limit, "nvmlDeviceGetEnforcedPowerLimit");
  api->bind(api->reasons, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!api->reasons) api->bind(api->reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
  api->bind(api->ecc, "nvmlDeviceGetEccMode");
  api->bind(api->driver, "nvmlSystemGetDriverVersion");
  api->bind(api->uuid, "nvmlDeviceGetUUID");
  api->bind(api->bus_width, "nvmlDeviceGetMemoryBusWidth");
  if (!api->init || !api->by_pci || api->init() != kSuccess) {
    api->shutdown = nullptr;
    return nullptr;
  }
  void* dev = nullptr;
  if (api->by_pci(pci_bus_id.c_str(), &dev) != kSuccess) return nullptr;
  std::unique_ptr<Nvml> n(new Nvml());
  n->api_ = std::move(api);
  n->device_ = dev;
  return n;
}

Nvml::~Nvml() = default;

ClockState Nvml::snapshot() const {
  ClockState c;
  unsigned v = 0;
  if (api_->clock && api_->clock(device_, kClockSm, &v) == kSuccess) c.sm_clock_mhz = static_cast<int>(v);
  if (api_->clock && api_->clock(device_, kClockMem, &v) == kSuccess) c.mem_clock_mhz = static_cast<int>(v);
  if (api_->temperature && api_->temperature(device_, kTempGpu, &v) == kSuccess)
    c.temperature_c = static_cast<int>(v);
  if (api_->power && api_->power(device_, &v) == kSuccess) c.power_w = v / 1000.0;
  unsigned long long r = 0;
  if (api_->reasons && api_->reasons(device_, &r) == kSuccess) {
    c.throttle_reasons = r;
    c.throttle = throttle_reason_names(r);
  }
  return c;
}

void Nvml::describe(DeviceInfo& d) const {
  char buf[96] = {};
  if (api_->driver && api_->driver(buf, sizeof buf) == kSuccess) d.driver = buf;
  if (api_->uuid && api_->uuid(device_, buf, sizeof buf) == kSuccess) d.uuid = buf;
  int cur = 0, pending = 0;
  if (api_->ecc && api_->ecc(device_, &cur, &pending) == kSuccess) d.ecc = cur != 0;
  unsigned v = 0;
  if (api_->power_limit && api_->power_limit(device_, &v) == kSuccess) d.power_limit_w = v / 1000.0;
  unsigned mem_mhz = 0, width = 0;
  if (api_->max_clock && api_->bus_width && api_->max_clock(device_, kClockMem, &mem_mhz) == kSuccess &&
      api_->bus_width(device_, &width) == kSuccess)
    d.theoretical_GBps = 2.0 * mem_mhz * 1e6 * (width / 8.0) / 1e9;  // double data rate
}

std::vector<std::string> throttle_reason_names(unsigned long long mask) {
  static const std::pair<unsigned long long, const char*> names[] = {
      {0x1, "gpu_idle"},
      {0x2, "applications_clocks_setting"},
      {0x4, "sw_power_cap"},
      {0x8, "hw_slowdown"},
      {0x10, "sync_boost"},
      {0x20, "sw_thermal_slowdown"},
      {0x40, "hw_thermal_slowdown"},
      {0x80, "hw_power_brake_slowdown"},
      {0x100, "display_clock_setting"},
  };
  std::vector<std::string> out;
  for (const auto& [bit, name] : names)
    if (mask & bit) out.emplace_back(name);
  return out;
}

}  // namespace db

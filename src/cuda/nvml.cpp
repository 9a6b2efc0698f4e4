// NVML through dlopen (see nvml.h).
#include "nvml.h"

#include <dlfcn.h>
#include <fmt/format.h>

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
  int (*energy)(Dev, unsigned long long*) = nullptr;
  const char* (*error_string)(int) = nullptr;

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
constexpr int kClockSm = 1, kClockMem = 2, kTempGpu = 0, kSuccess = 0, kNotSupported = 3;
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
  api->bind(api->energy, "nvmlDeviceGetTotalEnergyConsumption");
  api->bind(api->error_string, "nvmlErrorString");
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

namespace {

// "nvmlDeviceGetTotalEnergyConsumption: Not Supported"
std::string nvml_error(const char* call, int code, const char* (*error_string)(int)) {
  const char* text = error_string ? error_string(code) : nullptr;
  return text ? fmt::format("{}: {}", call, text) : fmt::format("{}: NVML error {}", call, code);
}

}  // namespace

std::optional<double> Nvml::energy_j(std::string& error) const {
  if (!api_->energy) {
    error = "this NVML has no nvmlDeviceGetTotalEnergyConsumption";
    return std::nullopt;
  }
  unsigned long long mj = 0;
  const int rc = api_->energy(device_, &mj);
  if (rc != kSuccess) {
    error = nvml_error("nvmlDeviceGetTotalEnergyConsumption", rc, api_->error_string);
    if (rc == kNotSupported) error += " (the counter needs a Volta or newer GPU)";
    return std::nullopt;
  }
  return static_cast<double>(mj) * 1e-3;
}

std::optional<ClockSample> Nvml::clocks() const {
  unsigned sm = 0, mem = 0;
  if (!api_->clock || api_->clock(device_, kClockSm, &sm) != kSuccess ||
      api_->clock(device_, kClockMem, &mem) != kSuccess)
    return std::nullopt;
  return ClockSample{static_cast<double>(sm), static_cast<double>(mem)};
}

std::optional<double> Nvml::power_usage_w(std::string& error) const {
  unsigned mw = 0;
  if (!api_->power) {
    error = "this NVML has no nvmlDeviceGetPowerUsage";
    return std::nullopt;
  }
  const int rc = api_->power(device_, &mw);
  if (rc != kSuccess) {
    error = nvml_error("nvmlDeviceGetPowerUsage", rc, api_->error_string);
    return std::nullopt;
  }
  return mw * 1e-3;
}

namespace {

class NvmlEnergySource final : public EnergySource {
 public:
  explicit NvmlEnergySource(std::unique_ptr<Nvml> nvml) : nvml_(std::move(nvml)) {
    if (!nvml_->clocks())
      clocks_why_ = "NVML could not read the SM and memory clocks (nvmlDeviceGetClockInfo)";
  }
  std::string name() const override { return "nvml total energy counter"; }
  std::optional<double> energy_j(std::string& error) override { return nvml_->energy_j(error); }
  std::optional<ClockSample> clocks() override { return nvml_->clocks(); }
  std::string clocks_unavailable() const override { return clocks_why_; }

 private:
  std::unique_ptr<Nvml> nvml_;
  std::string clocks_why_;
};

}  // namespace

std::unique_ptr<EnergySource> make_nvml_energy_source(const std::string& pci_bus_id, std::string& why) {
  std::unique_ptr<Nvml> nvml = Nvml::open(pci_bus_id);
  if (!nvml) {
    why = fmt::format("NVML is unavailable (libnvidia-ml.so.1, or device {} in it): no energy counter",
                      pci_bus_id);
    return nullptr;
  }
  std::string error;
  if (!nvml->energy_j(error)) {
    why = "NVML has no total energy counter for this GPU: " + error;
    return nullptr;
  }
  return std::make_unique<NvmlEnergySource>(std::move(nvml));
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

// NVML, loaded at run time (dlopen of libnvidia-ml.so.1, which ships with the driver), so
// the build needs no NVML headers or stubs and a machine without a driver still runs the
// CPU backend. Only the handful of queries the result records are bound. NVML is
// thread-safe: the energy sampler reads one Nvml from its thread while the run reads it from
// its own.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "decodebench/energy.h"
#include "decodebench/result.h"

namespace db {

class Nvml {
 public:
  // Null when the library or the device (by PCI bus id, as CUDA reports it) is unavailable.
  static std::unique_ptr<Nvml> open(const std::string& pci_bus_id);
  ~Nvml();

  ClockState snapshot() const;
  // Fills driver, uuid, ECC, power limit and theoretical bandwidth.
  void describe(DeviceInfo& d) const;

  // The board's total energy since the driver loaded (nvmlDeviceGetTotalEnergyConsumption,
  // Volta and newer), in joules; empty with `error` ("...: Not Supported") otherwise.
  std::optional<double> energy_j(std::string& error) const;
  // The SM and memory clocks now; empty when either read fails.
  std::optional<ClockSample> clocks() const;
  // The power draw (nvmlDeviceGetPowerUsage: on Ampere and newer but GA100 an average over
  // the last second), in W; empty with `error` otherwise.
  std::optional<double> power_usage_w(std::string& error) const;

 private:
  Nvml() = default;
  struct Api;
  std::unique_ptr<Api> api_;
  void* device_ = nullptr;
};

// The CUDA backend's energy source (energy.h): NVML's total energy counter and the SM and
// memory clocks of the device at `pci_bus_id`; null with why not in `why` where NVML, the
// device or the counter is missing (before Volta: NVML_ERROR_NOT_SUPPORTED).
std::unique_ptr<EnergySource> make_nvml_energy_source(const std::string& pci_bus_id, std::string& why);

// Names of the set bits of an NVML clock-event (throttle) reason mask.
std::vector<std::string> throttle_reason_names(unsigned long long mask);

}  // namespace db

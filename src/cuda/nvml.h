// NVML, loaded at run time (dlopen of libnvidia-ml.so.1, which ships with the driver), so
// the build needs no NVML headers or stubs and a machine without a driver still runs the
// CPU backend. Only the handful of queries the result records are bound.
#pragma once

#include <memory>
#include <optional>
#include <string>

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

 private:
  Nvml() = default;
  struct Api;
  std::unique_ptr<Api> api_;
  void* device_ = nullptr;
};

// Names of the set bits of an NVML clock-event (throttle) reason mask.
std::vector<std::string> throttle_reason_names(unsigned long long mask);

}  // namespace db

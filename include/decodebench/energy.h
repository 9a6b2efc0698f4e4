// Energy of the timed steps: a backend's energy counter (NVML's total energy on a GPU, RAPL
// on the host), read by the protocol around each timed repetition while a sampler thread
// polls it and the clocks, and the arithmetic that turns those reads into the result's
// energy figures (docs/method.md "Energy").
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "decodebench/result.h"

namespace db {

// A repetition's energy is reported only when the counter resolves it to this fraction:
// one update interval of the counter, the most either end of a read can lag, against the
// repetition's length. A repetition four times the counter's update at 5% per repetition
// shows as spread between repetitions and is then judged as TPOT's noise is.
inline constexpr double kEnergyResolution = 0.05;

// How often the sampler polls the counter and the clocks while a window is open.
inline constexpr double kEnergySamplePeriodS = 0.002;

// The idle window before a run: at least kIdleMinS, until it spans kIdleUpdates of the
// counter's observed updates (so that it resolves kEnergyResolution), at most kIdleMaxS.
inline constexpr double kIdleMinS = 0.25;
inline constexpr double kIdleMaxS = 2.0;
inline constexpr int kIdleUpdates = 20;

struct ClockSample {
  double sm_mhz = 0;
  double mem_mhz = 0;
};

// A cumulative energy counter, and the clocks where the device has them. Read from two
// threads (the protocol's edge reads and the sampler's polls): implementations are
// thread-safe.
class EnergySource {
 public:
  virtual ~EnergySource() = default;
  // What counts the energy (energy.source): "nvml total energy counter", "rapl package-0".
  virtual std::string name() const = 0;
  // The counter in joules since an origin of its own; empty with `error` set when the read
  // failed. Monotonic: a counter that wraps is unwrapped by the source.
  virtual std::optional<double> energy_j(std::string& error) = 0;
  // The SM and memory clocks now; empty where the source has none or the read failed.
  virtual std::optional<ClockSample> clocks() { return std::nullopt; }
  // Why clocks() is empty; "" when it samples clocks.
  virtual std::string clocks_unavailable() const { return "the energy source has no clocks"; }
};

// One window of the counter: the idle window, or a timed repetition.
struct EnergyWindow {
  double seconds = 0;               // host time between the counter's two reads
  std::optional<double> joules;     // the counter's difference; empty when a read failed
  std::string error;                // why joules is empty
  std::vector<ClockSample> clocks;  // sampled while it was open, its ends included
  int64_t polls = 0;                // the sampler's polls of the counter inside it
};

// What the sampler saw of the counter inside its windows: the time between two consecutive
// changes of its value (the first poll that sees a value), and the size of each change.
struct CounterObservation {
  std::vector<double> update_gaps_s;
  std::vector<double> increments_j;
};

// Polls an EnergySource on a thread of its own while a window is open (begin() .. end()),
// every `period_s`; the window's energy is the difference of the two reads that begin()
// and end() make on the calling thread, so the window is exactly the caller's.
class EnergySampler {
 public:
  explicit EnergySampler(std::unique_ptr<EnergySource> source, double period_s = kEnergySamplePeriodS);
  ~EnergySampler();
  EnergySampler(const EnergySampler&) = delete;
  EnergySampler& operator=(const EnergySampler&) = delete;

  const EnergySource& source() const { return *source_; }
  double period_s() const { return period_s_; }

  // Reads the counter: the window starts now.
  void begin();
  // Reads the counter again: the window ends now.
  EnergyWindow end();
  // A window of no work on the calling thread: kIdleMinS, longer until it spans kIdleUpdates
  // of the counter's observed updates, at most kIdleMaxS.
  EnergyWindow idle();

  // Every change of the counter seen in the windows so far.
  CounterObservation observed() const;

 private:
  void loop();
  // Notes a read of the counter at `t` inside the open window (a change, its gap, its size).
  void note_locked(const std::optional<double>& value, std::chrono::steady_clock::time_point t);

  std::unique_ptr<EnergySource> source_;
  double period_s_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false, quit_ = false;
  uint64_t window_ = 0;  // counts begin(): a poll records only into the window it began in
  std::chrono::steady_clock::time_point start_;
  std::optional<double> start_j_;
  std::string start_error_;
  std::vector<ClockSample> clocks_;
  int64_t polls_ = 0;
  std::optional<double> last_value_;  // the last value seen in this window
  std::optional<std::chrono::steady_clock::time_point> last_change_;
  CounterObservation observed_;
};

// What the protocol measured, for summarize_energy.
struct EnergyMeasurement {
  std::string source;         // EnergySource::name(); "" without one
  std::string reason;         // without a source: why (backend's reason, or --energy off)
  std::string clocks_reason;  // EnergySource::clocks_unavailable()
  double sample_period_s = 0;
  std::optional<EnergyWindow> idle;
  std::vector<EnergyWindow> windows;  // one a timed repetition, in order
  CounterObservation observed;
};

// The result's energy figures from the reads (docs/method.md "Energy"): per repetition
// the counter's difference, J/step (/ tokens), J/token (/ tokens x batch) and W (/ seconds);
// per run the median and spread of each. The energy figures are null (NaN, []) with
// `reason` when there is no counter, a read failed, the counter did not advance, its
// update interval was not observed (fewer than two changes within a repetition), or the
// update interval is more than kEnergyResolution of the shortest repetition; the clocks
// are null with `clocks_reason` when no window has a clock sample.
Energy summarize_energy(const EnergyMeasurement& m, int64_t tokens, int64_t batch);

// The median and spread (relative stdev) of per-repetition values; NaN for none.
RepetitionSpread repetition_spread(const std::vector<double>& values);

// What `decodebench info` says of a counter after an idle window: how often its value changed
// and by how much (median, least and largest), and the idle power; or that it did not change
// twice, so its update interval is longer than the window.
std::string describe_counter(const std::string& name, const EnergyWindow& idle, const CounterObservation& o);

// A result's J/step of each repetition (energy.repetition_j / config.tokens); [] when its
// energy is null.
std::vector<double> repetition_j_per_step(const Result& r);

// RAPL through the kernel's powercap interface: the package zones directly under `root`
// (intel-rapl:N named package-*) and their dram subzones (intel-rapl:N:M named dram), each
// energy_uj unwrapped with its max_energy_range_uj. Null with `why` when there is no such
// zone or one of them cannot be read (energy_uj is often readable by root only).
std::unique_ptr<EnergySource> make_rapl_source(const std::string& root, std::string& why);
inline constexpr const char* kPowercapRoot = "/sys/class/powercap";

// The sum of the package zones' long-term power limits (constraint_0_power_limit_uw), in W;
// empty where there is none or it cannot be read.
std::optional<double> rapl_power_limit_w(const std::string& root);

// The energy between two reads of a RAPL energy_uj that wraps to 0 past `range`
// (max_energy_range_uj), assuming at most one wrap between them (the sampler reads it every
// few ms; a wrap takes minutes).
uint64_t rapl_delta_uj(uint64_t before, uint64_t after, uint64_t range);

}  // namespace db

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

// A repetition's energy is reported only when its stated error is at most this fraction of
// it: read unaligned, one update interval of the counter (the most either end of a read can
// lag) against the repetition's length; aligned on the counter's updates, the error of the
// idle head and tail subtracted and of the updates' detection (summarize_energy). A
// repetition's error within that shows as spread between repetitions and is then judged as
// TPOT's noise is.
inline constexpr double kEnergyResolution = 0.05;

// How often the sampler polls the counter and the clocks while a window is open.
inline constexpr double kEnergySamplePeriodS = 0.002;

// How often the calling thread polls the counter while it waits for an update (an aligned
// window's ends) or measures the idle power: an update is seen within about this.
inline constexpr double kUpdatePollS = 0.0005;

// The idle window before a run: at least kIdleMinS, until it spans kIdleUpdates of the
// counter's observed updates, at most kIdleMaxS. 21 updates resolve the idle power to 4.8%,
// within kEnergyResolution with room for the update interval to read a little longer.
inline constexpr double kIdleMinS = 0.25;
inline constexpr double kIdleMaxS = 2.5;
inline constexpr int kIdleUpdates = 21;

// Aligned windows: a wait for the counter's next update gives up after kAlignTimeoutUpdates
// of its update intervals observed at idle, at most kAlignTimeoutMaxS; a counter that updates
// at least every kFineCounterPeriods sample periods is read unaligned, its updates as fine as
// the sampler's polls. The idle power subtracted over an aligned window's head and tail is
// taken to be known to kIdleUncertainty, the resolution it is reported at.
inline constexpr double kAlignTimeoutUpdates = 5;
inline constexpr double kAlignTimeoutMaxS = 1.0;
inline constexpr double kFineCounterPeriods = 2;
inline constexpr double kIdleUncertainty = kEnergyResolution;

// Seconds on the clock the sampler stamps its reads with and waits on: the host's steady
// clock (steady_timebase()), or a test's. Thread-safe: the sampler's thread reads it too.
class Timebase {
 public:
  virtual ~Timebase() = default;
  virtual double now_s() = 0;
  // The calling thread waits `seconds`.
  virtual void sleep_s(double seconds) = 0;
};
std::shared_ptr<Timebase> steady_timebase();

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

// One window of the counter: the idle window, or a timed repetition. Read unaligned, its ends
// are the counter's reads at the caller's begin() and end(); aligned, each end is the first
// read that saw the counter change after the caller's begin() and end() were called, so the
// window runs from one update to another and holds, beside the caller's work, an idle head
// (from the start's update to begin()'s return) and an idle tail (from end()'s call to the
// closing update).
struct EnergyWindow {
  double seconds = 0;               // host time between the window's two ends
  std::optional<double> joules;     // the counter's difference; empty when a read failed
  std::string error;                // why joules is empty
  std::vector<ClockSample> clocks;  // sampled while it was open, its ends included
  int64_t polls = 0;                // the sampler's polls of the counter inside it
  bool aligned = false;             // both ends on an update of the counter
  std::string unaligned_why;        // alignment was asked for and not reached: why
  double head_s = 0;                // aligned: the read that saw the start's update to begin()'s return
  double tail_s = 0;                // aligned: end()'s call to the closing update
  double detect_s = 0;              // aligned: the longest an end's update could go unseen
};

// What the sampler saw of the counter inside its windows: the time between two consecutive
// changes of its value (the first poll that sees a value), and the size of each change.
struct CounterObservation {
  std::vector<double> update_gaps_s;
  std::vector<double> increments_j;
};

// How the timed repetitions' windows are read (plan_windows): aligned on the counter's
// updates, or unaligned with why.
struct WindowPlan {
  bool aligned = false;
  std::string why;       // unaligned: why
  double timeout_s = 0;  // aligned: the longest a wait for an update lasts
};

// Polls an EnergySource on a thread of its own while a window is open (begin() .. end()),
// every `period_s`, for the clocks and the counter's changes; the window's energy is the
// difference of the reads that begin() and end() make on the calling thread, so the window
// is exactly the caller's, or (aligned, plan()) the caller's with the idle head and tail
// between it and the counter's updates.
class EnergySampler {
 public:
  explicit EnergySampler(std::unique_ptr<EnergySource> source, double period_s = kEnergySamplePeriodS,
                         std::shared_ptr<Timebase> time = steady_timebase());
  ~EnergySampler();
  EnergySampler(const EnergySampler&) = delete;
  EnergySampler& operator=(const EnergySampler&) = delete;

  const EnergySource& source() const { return *source_; }
  double period_s() const { return period_s_; }

  // How begin() and end() read the windows from now on (unaligned until called); called
  // between windows, on the thread that opens them.
  void plan(const WindowPlan& plan);

  // The window starts: unaligned, at the counter's read now; aligned, at the counter's next
  // update, polled for every kUpdatePollS (at most the plan's timeout: then unaligned, at the
  // last read), and begin() returns as soon as it has seen it.
  void begin();
  // The window ends: unaligned, at the counter's read now; aligned, at the counter's next
  // update (at most the plan's timeout: then unaligned, at the read now).
  EnergyWindow end();
  // An unaligned window of no work on the calling thread, which polls the counter every
  // kUpdatePollS: kIdleMinS, longer until it spans kIdleUpdates of the counter's observed
  // updates, at most kIdleMaxS.
  EnergyWindow idle();

  // Every change of the counter seen in the windows so far.
  CounterObservation observed() const;

 private:
  struct Update;
  // Reads the counter every kUpdatePollS until it differs from `from` (read from `read_at`
  // on), for at most `timeout_s`.
  Update next_update(double from, double read_at, double timeout_s);
  void open(bool align);
  EnergyWindow close(bool align);
  void loop();
  // Notes a read of the counter at `t` inside the open window (a change, its gap, its size).
  void note_locked(const std::optional<double>& value, double t);

  std::unique_ptr<EnergySource> source_;
  double period_s_;
  std::shared_ptr<Timebase> time_;
  WindowPlan plan_;  // the calling thread's only
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false, quit_ = false;
  uint64_t window_ = 0;  // counts begin(): a poll records only into the window it began in
  double work_ = 0;      // begin()'s return; the calling thread's only
  double start_ = 0;     // the window's start
  std::optional<double> start_j_;
  std::string start_error_;
  bool start_aligned_ = false;
  std::string start_why_;  // the start's alignment failed: why
  double start_detect_ = 0;
  std::vector<ClockSample> clocks_;
  int64_t polls_ = 0;
  std::optional<double> last_value_;  // the last value seen in this window
  std::optional<double> last_change_;
  CounterObservation observed_;
};

// What the protocol measured, for summarize_energy.
struct EnergyMeasurement {
  std::string source;         // EnergySource::name(); "" without one
  std::string reason;         // without a source: why (backend's reason, or --energy off)
  std::string clocks_reason;  // EnergySource::clocks_unavailable()
  double sample_period_s = 0;
  std::optional<EnergyWindow> idle;
  CounterObservation idle_observed;   // what the sampler saw of the counter in the idle window
  std::string window_why;             // the plan's: why the windows are read unaligned
  std::vector<EnergyWindow> windows;  // one a timed repetition, in order
  CounterObservation observed;
};

// The idle power: the idle window's energy over its length, where the counter's updates seen
// in it (their median interval) resolve it to kEnergyResolution; empty otherwise.
std::optional<double> idle_power_w(const EnergyWindow& idle, const CounterObservation& idle_observed);

// How a run's windows are read, from what the idle window saw: unaligned where the counter's
// update interval was not observed, where it updates at least every kFineCounterPeriods of
// the sampler's `sample_period_s` (a fine counter), or where the idle power is empty (the
// head and tail could not be subtracted); aligned otherwise, each wait for an update at most
// kAlignTimeoutUpdates intervals (kAlignTimeoutMaxS).
WindowPlan plan_windows(const CounterObservation& idle_observed, std::optional<double> idle_power_w,
                        double sample_period_s);

// The result's energy figures from the reads (docs/method.md "Energy"). Per repetition the
// steps' energy: unaligned, the counter's difference; aligned, the difference less the idle
// power over the window's head and tail. Then J/step (/ tokens), J/token (/ tokens x batch)
// and W (/ the steps' seconds); per run the median and spread of each. A repetition's error
// as a fraction of it: unaligned, the counter's update interval over its length; aligned,
// idle W x ((1 + kIdleUncertainty) x detect_s + kIdleUncertainty x (head_s + tail_s)) over its
// energy. The energy figures are null (NaN, []) with `reason` when there is no counter, a
// read failed, the counter did not advance (past the idle head and tail), an unaligned
// window's update interval was not observed (fewer than two changes within a repetition),
// or a repetition's error is more than kEnergyResolution of it; the clocks are null with
// `clocks_reason` when no window has a clock sample.
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

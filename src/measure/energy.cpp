// The energy sampler and the arithmetic of the result's energy figures (energy.h).
#include "decodebench/energy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "decodebench/measure.h"

namespace db {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double median_of(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

EnergySampler::EnergySampler(std::unique_ptr<EnergySource> source, double period_s)
    : source_(std::move(source)), period_s_(period_s) {
  thread_ = std::thread([this] { loop(); });
}

EnergySampler::~EnergySampler() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void EnergySampler::note_locked(const std::optional<double>& value, Clock::time_point t) {
  if (!value) return;
  if (last_value_ && *value != *last_value_) {
    observed_.increments_j.push_back(*value - *last_value_);
    if (last_change_) observed_.update_gaps_s.push_back(seconds_between(*last_change_, t));
    last_change_ = t;
  }
  last_value_ = value;
}

void EnergySampler::begin() {
  // The clocks first: the counter's read is the last thing before the caller's work.
  const std::optional<ClockSample> c = source_->clocks();
  std::string error;
  const std::optional<double> j = source_->energy_j(error);
  const Clock::time_point t = Clock::now();
  {
    std::lock_guard<std::mutex> lk(mu_);
    open_ = true;
    ++window_;
    start_ = t;
    start_j_ = j;
    start_error_ = error;
    clocks_.clear();
    if (c) clocks_.push_back(*c);
    polls_ = 0;
    // The start's value is the reference; the time of the change before it is unknown.
    last_value_ = j;
    last_change_.reset();
  }
  cv_.notify_all();
}

EnergyWindow EnergySampler::end() {
  std::string error;
  const std::optional<double> j = source_->energy_j(error);
  const Clock::time_point t = Clock::now();
  const std::optional<ClockSample> c = source_->clocks();
  EnergyWindow w;
  {
    std::lock_guard<std::mutex> lk(mu_);
    note_locked(j, t);
    open_ = false;
    w.seconds = seconds_between(start_, t);
    if (start_j_ && j)
      w.joules = *j - *start_j_;
    else
      w.error = start_j_ ? error : start_error_;
    w.clocks = std::move(clocks_);
    clocks_.clear();
    if (c) w.clocks.push_back(*c);
    w.polls = polls_;
  }
  cv_.notify_all();
  return w;
}

EnergyWindow EnergySampler::idle() {
  begin();
  const Clock::time_point t0 = Clock::now();
  const auto step = std::chrono::duration<double>(std::max(period_s_, 0.01));
  while (true) {
    std::this_thread::sleep_for(step);
    const double elapsed = seconds_between(t0, Clock::now());
    if (elapsed >= kIdleMaxS) break;
    if (elapsed < kIdleMinS) continue;
    double update = 0;
    {
      std::lock_guard<std::mutex> lk(mu_);
      update = median_of(observed_.update_gaps_s);
    }
    if (std::isfinite(update) && elapsed >= kIdleUpdates * update) break;
  }
  return end();
}

CounterObservation EnergySampler::observed() const {
  std::lock_guard<std::mutex> lk(mu_);
  return observed_;
}

void EnergySampler::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(period_s_));
  while (!quit_) {
    cv_.wait(lk, [this] { return quit_ || open_; });
    if (quit_) break;
    const uint64_t window = window_;
    const Clock::time_point next = Clock::now() + period;
    // The reads go without the lock: begin() and end() read the source meanwhile.
    lk.unlock();
    std::string error;
    const std::optional<double> j = source_->energy_j(error);
    const Clock::time_point t = Clock::now();
    const std::optional<ClockSample> c = source_->clocks();
    lk.lock();
    if (open_ && window_ == window) {
      ++polls_;
      note_locked(j, t);
      if (c) clocks_.push_back(*c);
    }
    cv_.wait_until(lk, next, [&] { return quit_ || !open_ || window_ != window; });
  }
}

RepetitionSpread repetition_spread(const std::vector<double>& values) {
  RepetitionSpread s;
  if (values.empty()) return s;
  s.median = median_of(values);
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  s.spread = repetition_noise(values);
  return s;
}

Energy summarize_energy(const EnergyMeasurement& m, int64_t tokens, int64_t batch) {
  Energy e;
  e.source = m.source;
  if (m.source.empty()) {
    e.reason = m.reason.empty() ? "no energy counter" : m.reason;
    e.clocks_reason = e.reason;
    return e;
  }
  e.sample_period_ms = m.sample_period_s * 1e3;
  for (const EnergyWindow& w : m.windows) {
    e.samples += w.polls;
    e.repetition_s.push_back(w.seconds);
  }

  // The clocks: the mean of each repetition's samples, where every repetition has some.
  const bool clocked =
      !m.windows.empty() && std::all_of(m.windows.begin(), m.windows.end(),
                                        [](const EnergyWindow& w) { return !w.clocks.empty(); });
  if (clocked) {
    for (const EnergyWindow& w : m.windows) {
      double sm = 0, mem = 0;
      for (const ClockSample& c : w.clocks) {
        sm += c.sm_mhz;
        mem += c.mem_mhz;
      }
      e.repetition_sm_clock_mhz.push_back(sm / static_cast<double>(w.clocks.size()));
      e.repetition_mem_clock_mhz.push_back(mem / static_cast<double>(w.clocks.size()));
    }
    e.sm_clock_mhz = repetition_spread(e.repetition_sm_clock_mhz);
    e.mem_clock_mhz = repetition_spread(e.repetition_mem_clock_mhz);
    e.clocks_reason.clear();
  } else {
    e.clocks_reason = !m.clocks_reason.empty() ? m.clocks_reason
                      : m.windows.empty()      ? "no timed repetition ran"
                                               : "a repetition has no clock sample";
  }

  // The counter's update interval, as observed, and what it resolves.
  const double update_s = median_of(m.observed.update_gaps_s);
  if (std::isfinite(update_s)) e.counter_update_ms = update_s * 1e3;
  double shortest = std::numeric_limits<double>::infinity();
  for (const EnergyWindow& w : m.windows) shortest = std::min(shortest, w.seconds);
  const double resolution = update_s / shortest;  // NaN or infinite where either is unknown
  if (std::isfinite(resolution)) e.resolution = resolution;

  // Idle: reported as measured, never subtracted; null unless resolved as a repetition is.
  if (m.idle) {
    e.idle_s = m.idle->seconds;
    if (m.idle->joules && *m.idle->joules > 0 && std::isfinite(update_s) && m.idle->seconds > 0 &&
        update_s / m.idle->seconds <= kEnergyResolution)
      e.idle_power_w = *m.idle->joules / m.idle->seconds;
  }

  // The energy figures, or why they are null.
  e.reason.clear();
  if (m.windows.empty()) e.reason = "no timed repetition ran";
  for (size_t i = 0; i < m.windows.size() && e.reason.empty(); ++i) {
    const EnergyWindow& w = m.windows[i];
    if (!w.joules)
      e.reason = fmt::format("the energy counter could not be read in repetition {}: {}", i + 1,
                             w.error.empty() ? "no value" : w.error);
    else if (!(*w.joules > 0))
      e.reason =
          fmt::format("the energy counter did not advance over repetition {} ({:.3f} s)", i + 1, w.seconds);
  }
  if (e.reason.empty() && !std::isfinite(update_s))
    e.reason = fmt::format(
        "the energy counter changed fewer than twice within every repetition ({:.3f} s the shortest): its "
        "update "
        "interval, and so the resolution, is unknown; lengthen the repetitions with --tokens",
        shortest);
  if (e.reason.empty() && !(resolution <= kEnergyResolution)) {
    const auto needed =
        static_cast<int64_t>(std::ceil(static_cast<double>(tokens) * resolution / kEnergyResolution));
    e.reason = fmt::format(
        "a repetition of {:.3f} s spans {:.1f} of the energy counter's {:.1f} ms updates: resolution "
        "{:.1f}%, "
        "coarser than the {:g}% energy is reported at; --tokens {} or more reaches it",
        shortest, shortest / update_s, update_s * 1e3, 100 * resolution, 100 * kEnergyResolution, needed);
  }
  if (!e.reason.empty()) return e;

  std::vector<double> per_step, per_token, watts;
  for (const EnergyWindow& w : m.windows) {
    e.repetition_j.push_back(*w.joules);
    per_step.push_back(*w.joules / static_cast<double>(tokens));
    per_token.push_back(per_step.back() / static_cast<double>(batch));
    watts.push_back(*w.joules / w.seconds);
  }
  e.j_per_step = repetition_spread(per_step);
  e.j_per_token = repetition_spread(per_token);
  e.power_w = repetition_spread(watts);
  e.tokens_per_j = 1 / *e.j_per_token.median;
  return e;
}

std::string describe_counter(const std::string& name, const EnergyWindow& idle, const CounterObservation& o) {
  std::string text = name + ": ";
  const auto range = [](const std::vector<double>& v, double scale, const char* unit) {
    return fmt::format("{:.3g}{} (median of {}; {:.3g} to {:.3g})", median_of(v) * scale, unit, v.size(),
                       *std::min_element(v.begin(), v.end()) * scale,
                       *std::max_element(v.begin(), v.end()) * scale);
  };
  if (o.update_gaps_s.empty())
    text += fmt::format("changed {} times in {:.2f} s of idle: its update interval is longer than that",
                        o.increments_j.size(), idle.seconds);
  else
    text += "changes every " + range(o.update_gaps_s, 1e3, " ms") + ", by " + range(o.increments_j, 1, " J");
  if (idle.joules && idle.seconds > 0)
    text += fmt::format("; idle {:.1f} W over {:.2f} s", *idle.joules / idle.seconds, idle.seconds);
  else if (!idle.error.empty())
    text += "; " + idle.error;
  return text;
}

std::vector<double> repetition_j_per_step(const Result& r) {
  std::vector<double> v;
  if (!r.energy.reason.empty() || r.config.tokens <= 0) return v;
  for (double j : r.energy.repetition_j) v.push_back(j / static_cast<double>(r.config.tokens));
  return v;
}

}  // namespace db

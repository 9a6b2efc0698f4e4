// The energy sampler and the arithmetic of the result's energy figures (energy.h).
#include "decodebench/energy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "decodebench/stats.h"

namespace db {

namespace {

using Clock = std::chrono::steady_clock;

double median_of(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

class SteadyTimebase final : public Timebase {
 public:
  double now_s() override { return std::chrono::duration<double>(Clock::now() - origin_).count(); }
  void sleep_s(double seconds) override {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }

 private:
  const Clock::time_point origin_ = Clock::now();
};

std::string ms_text(double s) {
  return fmt::format("{:.4g} ms", s * 1e3);
}

}  // namespace

std::shared_ptr<Timebase> steady_timebase() {
  return std::make_shared<SteadyTimebase>();
}

// What a wait for the counter's next update saw.
struct EnergySampler::Update {
  std::optional<double> value;  // the last read's; empty when it failed
  std::string error;            // why value is empty
  double t = 0;                 // when the last read returned
  bool changed = false;         // the last read saw the counter change
  double detect_s = 0;          // changed: from the start of the read before to t
};

EnergySampler::EnergySampler(std::unique_ptr<EnergySource> source, double period_s,
                             std::shared_ptr<Timebase> time)
    : source_(std::move(source)), period_s_(period_s), time_(std::move(time)) {
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

void EnergySampler::plan(const WindowPlan& plan) {
  plan_ = plan;
}

void EnergySampler::note_locked(const std::optional<double>& value, double t) {
  if (!value) return;
  // A read that overlapped a later one may return an older value: the counter only rises.
  if (last_value_ && *value < *last_value_) return;
  if (last_value_ && *value != *last_value_) {
    observed_.increments_j.push_back(*value - *last_value_);
    if (last_change_) observed_.update_gaps_s.push_back(t - *last_change_);
    last_change_ = t;
  }
  last_value_ = value;
}

EnergySampler::Update EnergySampler::next_update(double from, double read_at, double timeout_s) {
  Update u;
  const double t0 = time_->now_s();
  double before = read_at;  // the start of the read before this one
  while (true) {
    time_->sleep_s(kUpdatePollS);
    const double s = time_->now_s();
    u.value = source_->energy_j(u.error);
    u.t = time_->now_s();
    if (!u.value) return u;
    if (*u.value != from) {
      u.changed = true;
      u.detect_s = u.t - before;
      return u;
    }
    if (u.t - t0 >= timeout_s) return u;
    before = s;
  }
}

void EnergySampler::open(bool align) {
  // The clocks first: the counter's read (or the update waited for) is the last thing
  // before the caller's work.
  const std::optional<ClockSample> c = source_->clocks();
  std::string error;
  const double s = time_->now_s();
  std::optional<double> j = source_->energy_j(error);
  double t = time_->now_s();
  bool aligned = false;
  std::string why;
  double detect = 0;
  if (align && j) {
    const Update u = next_update(*j, s, plan_.timeout_s);
    j = u.value;
    error = u.error;
    t = u.t;
    aligned = u.changed;
    detect = u.detect_s;
    if (!u.value)
      why = "the counter could not be read at the window's start: " + u.error;
    else if (!u.changed)
      why =
          fmt::format("the counter did not change within {} of the window's start", ms_text(plan_.timeout_s));
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    open_ = true;
    ++window_;
    start_ = t;
    start_j_ = j;
    start_error_ = error;
    start_aligned_ = aligned;
    start_why_ = why;
    start_detect_ = detect;
    clocks_.clear();
    if (c) clocks_.push_back(*c);
    polls_ = 0;
    // The start's value is the reference; the time of the change before it is known only
    // where the start waited for it.
    last_value_ = j;
    last_change_.reset();
    if (aligned) last_change_ = t;
  }
  cv_.notify_all();
  work_ = time_->now_s();
}

EnergyWindow EnergySampler::close(bool align) {
  const double call = time_->now_s();
  std::string error;
  const std::optional<double> j = source_->energy_j(error);
  const double t = time_->now_s();
  const std::optional<ClockSample> c = source_->clocks();
  EnergyWindow w;
  bool start_aligned = false;
  std::optional<double> start_j;
  double start = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    note_locked(j, t);
    open_ = false;
    w.seconds = t - start_;
    if (start_j_ && j)
      w.joules = *j - *start_j_;
    else
      w.error = start_j_ ? error : start_error_;
    w.clocks = std::move(clocks_);
    clocks_.clear();
    if (c) w.clocks.push_back(*c);
    w.polls = polls_;
    w.unaligned_why = start_why_;
    start_aligned = start_aligned_;
    start_j = start_j_;
    start = start_;
    w.detect_s = start_detect_;
  }
  cv_.notify_all();
  if (!align || !start_aligned || !start_j || !j) {
    w.detect_s = 0;
    return w;
  }
  // The closing update: the window's energy and length run to it.
  const Update u = next_update(*j, call, plan_.timeout_s);
  if (!u.changed) {
    w.detect_s = 0;
    w.unaligned_why = u.value ? fmt::format("the counter did not change within {} of the window's end",
                                            ms_text(plan_.timeout_s))
                              : "the counter could not be read at the window's end: " + u.error;
    return w;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    note_locked(u.value, u.t);
  }
  w.aligned = true;
  w.seconds = u.t - start;
  w.joules = *u.value - *start_j;
  w.head_s = work_ - start;
  w.tail_s = u.t - call;
  w.detect_s = std::max(w.detect_s, u.detect_s);
  return w;
}

void EnergySampler::begin() {
  open(plan_.aligned);
}

EnergyWindow EnergySampler::end() {
  return close(plan_.aligned);
}

EnergyWindow EnergySampler::idle() {
  open(false);
  const double t0 = time_->now_s();
  while (true) {
    time_->sleep_s(kUpdatePollS);
    std::string error;
    const std::optional<double> j = source_->energy_j(error);
    const double t = time_->now_s();
    const double elapsed = t - t0;
    double update = 0;
    {
      std::lock_guard<std::mutex> lk(mu_);
      note_locked(j, t);
      update = median_of(observed_.update_gaps_s);
    }
    if (elapsed >= kIdleMaxS) break;
    if (elapsed < kIdleMinS) continue;
    if (std::isfinite(update) && elapsed >= kIdleUpdates * update) break;
  }
  return close(false);
}

CounterObservation EnergySampler::observed() const {
  std::lock_guard<std::mutex> lk(mu_);
  return observed_;
}

void EnergySampler::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(period_s_));
  while (true) {
    cv_.wait(lk, [this] { return quit_ || open_; });
    if (quit_) break;
    const uint64_t window = window_;
    const auto done = [&] { return quit_ || !open_ || window_ != window; };
    // The first poll a period after the window opens: begin() read the counter and the clocks.
    Clock::time_point next = Clock::now() + period;
    while (!cv_.wait_until(lk, next, done)) {
      next = Clock::now() + period;
      // The reads go without the lock: begin() and end() read the source meanwhile.
      lk.unlock();
      std::string error;
      const std::optional<double> j = source_->energy_j(error);
      const double t = time_->now_s();
      const std::optional<ClockSample> c = source_->clocks();
      lk.lock();
      if (done()) break;
      ++polls_;
      note_locked(j, t);
      if (c) clocks_.push_back(*c);
    }
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

std::optional<double> idle_power_w(const EnergyWindow& idle, const CounterObservation& idle_observed) {
  const double update_s = median_of(idle_observed.update_gaps_s);
  if (idle.joules && *idle.joules > 0 && std::isfinite(update_s) && idle.seconds > 0 &&
      update_s / idle.seconds <= kEnergyResolution)
    return *idle.joules / idle.seconds;
  return std::nullopt;
}

WindowPlan plan_windows(const CounterObservation& idle_observed, std::optional<double> idle_power,
                        double sample_period_s) {
  WindowPlan p;
  const double update_s = median_of(idle_observed.update_gaps_s);
  if (!std::isfinite(update_s))
    p.why =
        "the counter's update interval was not observed at idle (it changed fewer than twice): the windows "
        "are read at the steps' ends";
  else if (update_s <= kFineCounterPeriods * sample_period_s)
    p.why = fmt::format(
        "the counter updates every {}, within {:g} of the sampler's {} polls: the windows are read at the "
        "steps' ends, as fine",
        ms_text(update_s), kFineCounterPeriods, ms_text(sample_period_s));
  else if (!idle_power)
    p.why =
        "the idle power is null (not resolved to 5%): an aligned window's idle head and tail could not be "
        "subtracted, so the windows are read at the steps' ends";
  else {
    p.aligned = true;
    p.timeout_s = std::min(kAlignTimeoutMaxS, kAlignTimeoutUpdates * update_s);
  }
  return p;
}

Energy summarize_energy(const EnergyMeasurement& m, int64_t tokens, int64_t batch) {
  Energy e;
  e.source = m.source;
  if (m.source.empty()) {
    e.reason = m.reason.empty() ? "no energy counter" : m.reason;
    e.clocks_reason = e.reason;
    e.window_reason = e.reason;
    return e;
  }
  e.sample_period_ms = m.sample_period_s * 1e3;
  for (const EnergyWindow& w : m.windows) e.samples += w.polls;

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

  // The counter's update interval, as observed; the idle power, as the idle window resolves it.
  const double update_s = median_of(m.observed.update_gaps_s);
  if (std::isfinite(update_s)) e.counter_update_ms = update_s * 1e3;
  std::optional<double> idle_w;
  if (m.idle) {
    e.idle_s = m.idle->seconds;
    idle_w = idle_power_w(*m.idle, m.idle_observed);
    e.idle_power_w = idle_w;
  }

  // How the windows were read.
  const bool aligned = !m.windows.empty() && std::all_of(m.windows.begin(), m.windows.end(),
                                                         [](const EnergyWindow& w) { return w.aligned; });
  e.window = aligned ? "aligned" : "unaligned";
  e.window_reason.clear();
  if (!aligned) {
    e.window_reason = m.window_why;
    for (size_t i = 0; i < m.windows.size() && e.window_reason.empty(); ++i)
      if (!m.windows[i].aligned && !m.windows[i].unaligned_why.empty())
        e.window_reason = fmt::format("repetition {}: {}", i + 1, m.windows[i].unaligned_why);
    if (e.window_reason.empty())
      e.window_reason = m.windows.empty() ? "no timed repetition ran" : "the windows were read unaligned";
  }
  double detect_s = -1;
  for (const EnergyWindow& w : m.windows)
    if (w.aligned) detect_s = std::max(detect_s, w.detect_s);
  if (detect_s >= 0) e.detect_ms = detect_s * 1e3;

  // Each repetition's steps: their seconds and energy, and the energy's error over it.
  struct Steps {
    double s = 0, j = 0, idle_j = 0, error_j = 0, resolution = 0;
  };
  std::vector<Steps> steps;
  e.reason.clear();
  if (m.windows.empty()) e.reason = "no timed repetition ran";
  for (size_t i = 0; i < m.windows.size(); ++i) {
    const EnergyWindow& w = m.windows[i];
    const double idle_s = w.aligned ? w.head_s + w.tail_s : 0;
    Steps st;
    st.s = w.seconds - idle_s;
    e.repetition_s.push_back(st.s);
    if (!e.reason.empty()) continue;
    if (!w.joules) {
      e.reason = fmt::format("the energy counter could not be read in repetition {}: {}", i + 1,
                             w.error.empty() ? "no value" : w.error);
      continue;
    }
    if (!(*w.joules > 0)) {
      e.reason =
          fmt::format("the energy counter did not advance over repetition {} ({:.3f} s)", i + 1, w.seconds);
      continue;
    }
    if (!w.aligned) {
      st.j = *w.joules;
      st.resolution = update_s / w.seconds;  // NaN where the update interval is unknown
    } else if (!idle_w) {
      e.reason = fmt::format(
          "repetition {}'s window is aligned on the energy counter's updates, but the idle power is null: "
          "its "
          "idle head and tail cannot be subtracted",
          i + 1);
      continue;
    } else {
      st.idle_j = *idle_w * idle_s;
      st.j = *w.joules - st.idle_j;
      st.error_j = *idle_w * ((1 + kIdleUncertainty) * w.detect_s + kIdleUncertainty * idle_s);
      if (!(st.j > 0)) {
        e.reason = fmt::format(
            "the energy counter's {:.3f} J over repetition {} is no more than its idle head and tail's "
            "{:.3f} J",
            *w.joules, i + 1, st.idle_j);
        continue;
      }
      st.resolution = st.error_j / st.j;
    }
    steps.push_back(st);
  }
  if (!e.reason.empty()) return e;

  // The resolution: the largest repetition's (an unknown one, NaN, the largest of all).
  const auto key = [](double r) { return std::isnan(r) ? std::numeric_limits<double>::infinity() : r; };
  size_t worst = 0;
  double shortest_unaligned = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < steps.size(); ++i) {
    if (key(steps[i].resolution) > key(steps[worst].resolution)) worst = i;
    if (!m.windows[i].aligned) shortest_unaligned = std::min(shortest_unaligned, m.windows[i].seconds);
  }
  const double resolution = steps[worst].resolution;
  if (std::isfinite(resolution)) e.resolution = resolution;
  const EnergyWindow& ww = m.windows[worst];
  const std::string unaligned_note =
      e.window_reason.empty() ? ""
                              : " (windows not aligned on the counter's updates: " + e.window_reason + ")";
  if (std::isnan(resolution))
    e.reason = fmt::format(
        "the energy counter changed fewer than twice within every repetition ({:.3f} s the shortest): its "
        "update interval, and so the resolution, is unknown; lengthen the repetitions with --tokens{}",
        shortest_unaligned, unaligned_note);
  else if (!(resolution <= kEnergyResolution)) {
    auto needed =
        static_cast<int64_t>(std::ceil(static_cast<double>(tokens) * resolution / kEnergyResolution));
    if (ww.aligned) {
      // The advice plans for the error's bound, not this run's draw of it: a head and a tail
      // of an update interval each, and the ends' updates seen at twice the slowest detection
      // of the run (a counter read's latency under load differs between runs: 28-42 ms on the
      // H200). A run with that many tokens then reaches the resolution unless its reads are
      // slower still.
      double slowest = 0;
      for (const EnergyWindow& w : m.windows)
        if (w.aligned) slowest = std::max(slowest, w.detect_s);
      const double ends_s = std::max(std::isfinite(update_s) ? 2 * update_s : 0.0, ww.head_s + ww.tail_s);
      const double planned_j = *idle_w * ((1 + kIdleUncertainty) * 2 * slowest + kIdleUncertainty * ends_s);
      needed = std::max(needed, static_cast<int64_t>(std::ceil(static_cast<double>(tokens) * planned_j /
                                                               (kEnergyResolution * steps[worst].j))));
    }
    if (ww.aligned)
      e.reason = fmt::format(
          "repetition {}'s error, {:.3g} J (its idle head and tail of {} at the idle {:.1f} W, known to "
          "{:g}%, "
          "and its ends' updates seen within {}), is {:.1f}% of its {:.4g} J, coarser than the {:g}% energy "
          "is reported at; --tokens {} or more reaches it",
          worst + 1, steps[worst].error_j, ms_text(ww.head_s + ww.tail_s), *idle_w, 100 * kIdleUncertainty,
          ms_text(ww.detect_s), 100 * resolution, steps[worst].j, 100 * kEnergyResolution, needed);
    else
      e.reason = fmt::format(
          "a repetition of {:.3f} s spans {:.1f} of the energy counter's {:.1f} ms updates: resolution "
          "{:.1f}%, coarser than the {:g}% energy is reported at; --tokens {} or more reaches it{}",
          ww.seconds, ww.seconds / update_s, update_s * 1e3, 100 * resolution, 100 * kEnergyResolution,
          needed, unaligned_note);
  }
  if (!e.reason.empty()) return e;

  std::vector<double> per_step, per_token, watts;
  for (const Steps& st : steps) {
    e.repetition_j.push_back(st.j);
    e.repetition_idle_j.push_back(st.idle_j);
    per_step.push_back(st.j / static_cast<double>(tokens));
    per_token.push_back(per_step.back() / static_cast<double>(batch));
    watts.push_back(st.j / st.s);
  }
  for (const EnergyWindow& w : m.windows) e.repetition_tail_s.push_back(w.aligned ? w.tail_s : 0);
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

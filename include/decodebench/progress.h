// Phases of a run on stderr, for runs long enough to need them: nothing for the first
// kQuietSeconds (mode automatic), then the current phase with its elapsed time and an
// estimate of what is left, rewritten in place on a terminal and one line per phase
// otherwise. A background thread prints, so a phase that blocks (loading 70b) shows too.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace db {

enum class ProgressMode { automatic, on, off };

class Progress {
 public:
  using Mode = ProgressMode;
  static constexpr double kQuietSeconds = 2.0;

  Progress(std::string label, Mode mode);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // A new phase ("load", "prefill", "warm-up", "timed"); eta_s < 0: unknown.
  void phase(const std::string& name, double eta_s = -1);
  // Within a phase: what is done ("repetition 3 of 5"), and the estimate of what is left.
  void detail(const std::string& what, double eta_s = -1);

 private:
  using Clock = std::chrono::steady_clock;
  void loop();
  void print_locked(bool phase_changed);

  std::string label_;
  Mode mode_;
  bool tty_;
  Clock::time_point start_, phase_start_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, shown_ = false, line_open_ = false;
  std::string phase_, detail_, printed_phase_;
  double eta_s_ = -1;
  Clock::time_point eta_at_;
  std::thread thread_;
};

}  // namespace db

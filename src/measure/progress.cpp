// Phases of a run on stderr (see include/decodebench/progress.h).
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "decodebench/progress.h"

namespace db {
namespace {

std::string seconds(double s) {
  return s < 100 ? fmt::format("{:.1f}s", s) : fmt::format("{:.0f}s", s);
}

}  // namespace

Progress::Progress(std::string label, Mode mode)
    : label_(std::move(label)), mode_(mode), tty_(isatty(STDERR_FILENO) != 0) {
  start_ = phase_start_ = Clock::now();
  if (mode_ != Mode::off) thread_ = std::thread([this] { loop(); });
}

Progress::~Progress() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (line_open_) std::fprintf(stderr, "\r\033[K");  // leave the terminal's line clean
}

void Progress::phase(const std::string& name, double eta_s) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = name;
  detail_.clear();
  phase_start_ = eta_at_ = Clock::now();
  eta_s_ = eta_s;
  if (shown_) print_locked(true);
}

void Progress::detail(const std::string& what, double eta_s) {
  std::lock_guard<std::mutex> lock(mu_);
  detail_ = what;
  eta_at_ = Clock::now();
  eta_s_ = eta_s;
}

void Progress::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  const auto quiet = std::chrono::duration<double>(mode_ == Mode::on ? 0.0 : kQuietSeconds);
  if (!cv_.wait_for(lock, quiet, [this] { return done_; })) {
    shown_ = true;
    print_locked(true);
  }
  // A terminal's line is refreshed a few times a second; other streams get a line per phase.
  while (!cv_.wait_for(lock, std::chrono::milliseconds(250), [this] { return done_; }))
    if (tty_) print_locked(false);
}

void Progress::print_locked(bool phase_changed) {
  if (phase_.empty()) return;
  const auto now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  std::string s = fmt::format("decodebench: {}: {}", label_, phase_);
  if (!detail_.empty()) s += ", " + detail_;
  if (tty_)
    s +=
        fmt::format(" ({} in this phase", seconds(std::chrono::duration<double>(now - phase_start_).count()));
  else
    s += fmt::format(" (at {}", seconds(elapsed));
  if (eta_s_ >= 0) {
    const double left = eta_s_ - std::chrono::duration<double>(now - eta_at_).count();
    s += fmt::format(", ~{} left", seconds(left > 0 ? left : 0));
  }
  s += ")";
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", s.c_str());
    line_open_ = true;
  } else if (phase_changed && phase_ != printed_phase_) {
    std::fprintf(stderr, "%s\n", s.c_str());
    printed_phase_ = phase_;
  }
  std::fflush(stderr);
}

}  // namespace db

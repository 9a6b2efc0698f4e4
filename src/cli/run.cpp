// The run verb: a run assembled from the spec (src/run/run.h), its summary on stdout and,
// with -o, the result file; with --runs, each run in a process of its own. And the info verb.
#include <iostream>
#include <memory>

#include "decodebench/backend.h"
#include "decodebench/commands.h"
#include "decodebench/error.h"
#include "decodebench/printers.h"
#include "decodebench/stats.h"
#include "run.h"

namespace db {

int cmd_run(const RunSpec& spec) {
  if (spec.runs > 1) {
    std::vector<Result> results;
    for (int i = 0; i < spec.runs; ++i) {
      results.push_back(run_in_process(spec));
      const Timing& t = results.back().timing;
      fmt::print(stderr, "decodebench: run {} of {} (a separate process): {:.3f} ms median ± {:.2f}%\n",
                 i + 1, spec.runs, t.tpot_ms.median, 100 * t.noise);
      std::fflush(stderr);
    }
    std::vector<double> medians, energies;
    for (const Result& r : results) {
      medians.push_back(r.timing.tpot_ms.median);
      if (r.energy.reason.empty() && r.energy.j_per_token.median)
        energies.push_back(*r.energy.j_per_token.median);
    }
    // The energy's spread across runs where every run measured it.
    const std::string energy =
        energies.size() == results.size()
            ? fmt::format("; {:.4g} J/token median of medians, {:.2f}% spread across runs",
                          compute_stats(energies).median, 100 * repetition_noise(energies))
            : "";
    std::ostream& table = spec.output == "-" ? std::cerr : std::cout;
    table << format_results(results, OutputFormat::md)
          << fmt::format(
                 "\n{} runs in separate processes: {:.3f} ms median of medians, {:.2f}% spread across "
                 "runs (relative stdev){}\n",
                 spec.runs, compute_stats(medians).median, 100 * repetition_noise(medians), energy)
          << std::flush;
    if (spec.output == "-")
      std::cout << format_results(results, spec.format) << std::flush;
    else if (!spec.output.empty())
      write_results_file(spec.output, results, spec.format);
    return 0;
  }
  const Result r = run_one(spec);
  // -o -: the result on stdout, and the summary on stderr so that stdout stays one document.
  if (spec.output == "-") {
    std::cerr << summary_text(r) << std::flush;
    std::cout << format_results({r}, spec.format) << std::flush;
  } else {
    std::cout << summary_text(r) << std::flush;
  }
  for (const std::string& w : r.timing.warnings) warn_line(w);
  if (!spec.output.empty() && spec.output != "-") write_results_file(spec.output, {r}, spec.format);
  return 0;
}

int cmd_info(int device) {
  // The energy counter first, at idle, before the bandwidth probe warms the device.
  std::string energy;
  {
    std::unique_ptr<Backend> backend = make_cuda_backend(device);
    if (std::unique_ptr<EnergySource> source = backend->energy_source(energy)) {
      const std::string name = source->name();
      EnergySampler sampler(std::move(source));
      const EnergyWindow idle = sampler.idle();
      energy = describe_counter(name, idle, sampler.observed());
    } else {
      energy = "n/a: " + energy;
    }
  }
  const DeviceInfo d = cuda_device_info(device, true);
  fmt::print("device        {} (cc {}, {} SMs)\n", d.name, d.compute_capability, d.sm_count);
  fmt::print("uuid          {}\n", d.uuid);
  fmt::print("memory        {:.1f} GiB, L2 {:.1f} MiB\n", d.memory_bytes / 1073741824.0,
             d.l2_bytes / 1048576.0);
  fmt::print("driver        {}, ECC {}\n", d.driver, d.ecc ? "on" : "off");
  fmt::print("bandwidth     {:.0f} GB/s theoretical, {:.0f} GB/s measured streaming read\n",
             d.theoretical_GBps, d.peak_read_GBps);
  if (d.start)
    fmt::print("clocks        SM {} MHz, memory {} MHz, {} C, power limit {:.0f} W\n", d.start->sm_clock_mhz,
               d.start->mem_clock_mhz, d.start->temperature_c, d.power_limit_w);
  fmt::print("energy        {}\n", energy);
  return 0;
}

}  // namespace db

// apps/common/profile_report.cpp: the --profile flag, its window of steps, and its table and JSON.
#include "apps/common/profile_report.h"
#include "apps/common/run.h"

#include <fmt/format.h>

#include <cstdio>
#include <map>

namespace apps {

using engine::profile::Entry;
using engine::profile::Phase;
using engine::profile::Report;

void add_profile_flag(CLI::App& app, int& steps) {
    app.add_option("--profile", steps,
                   "profile N training steps (from the second one): time per op, forward and backward apart, "
                   "with GFLOP/s of the GEMMs and GB/s of the rest, as a table on stderr and as JSON (0: off)")
        ->capture_default_str()->check(apps::NonNegative);
}

void ProfileWindow::begin() {
    if (steps_ <= 0 || done_) return;
    if (!started_ && ++seen_ >= 2) {
        engine::profile::start(device_);
        started_ = true;
    }
    if (started_) engine::profile::step_begin();
}

void ProfileWindow::end() {
    if (!started_ || done_) return;
    engine::profile::step_end();
    if (++profiled_ >= steps_) {
        report_ = engine::profile::stop();
        done_ = true;
    }
}

const Report* ProfileWindow::finished() {
    if (!done_ || reported_) return nullptr;
    reported_ = true;
    return &report_;
}

namespace {

std::string rate(const Entry& e) {
    if (e.ms <= 0) return "";
    if (e.flops > 0) return fmt::format("{:.1f} GFLOP/s", e.flops / e.ms / 1e6);
    if (e.bytes > 0) return fmt::format("{:.2f} GB/s", e.bytes / e.ms / 1e6);
    return "";
}

}  // namespace

std::string profile_table(const Report& r, const std::string& title) {
    const double n = r.steps > 0 ? (double)r.steps : 1.0;
    const double step = r.step_ms / n, charged = r.charged_ms() / n;
    std::string out = fmt::format(
        "{}: {} steps on {}; a step {:.2f} ms (wall clock), {:.2f} ms of it charged to the labels below ({:.1f}%)\n",
        title, r.steps, r.device == engine::Device::CUDA ? "cuda (device time from events)" : "cpu", step, charged,
        step > 0 ? 100.0 * charged / step : 0.0);
    out += fmt::format("{:<34} {:<12} {:>9} {:>11} {:>7}  {}\n", "op", "phase", "calls", "ms/step", "share",
                       "rate");
    std::map<Phase, double> by_phase;
    double gemm_ms = 0, gemm_flops = 0;
    for (const Entry& e : r.entries) {
        out += fmt::format("{:<34} {:<12} {:>9.1f} {:>11.3f} {:>6.1f}%  {}\n", e.name,
                           engine::profile::phase_name(e.phase), (double)e.calls / n, e.ms / n,
                           step > 0 ? 100.0 * e.ms / n / step : 0.0, rate(e));
        by_phase[e.phase] += e.ms / n;
        if (e.flops > 0) {
            gemm_ms += e.ms / n;
            gemm_flops += e.flops / n;
        }
    }
    out += "per step:";
    for (Phase p : {Phase::Forward, Phase::Backward, Phase::Outside})
        out += fmt::format(" {} {:.2f} ms ({:.1f}%),", engine::profile::phase_name(p), by_phase[p],
                           step > 0 ? 100.0 * by_phase[p] / step : 0.0);
    out += fmt::format(" ops with GEMMs {:.2f} ms ({:.1f}%) at {:.1f} GFLOP/s ({:.2f} GFLOP a step)\n", gemm_ms,
                       step > 0 ? 100.0 * gemm_ms / step : 0.0, gemm_ms > 0 ? gemm_flops / gemm_ms / 1e6 : 0.0,
                       gemm_flops / 1e9);
    return out;
}

nlohmann::ordered_json profile_json(const Report& r) {
    const double n = r.steps > 0 ? (double)r.steps : 1.0;
    nlohmann::ordered_json entries = nlohmann::ordered_json::array();
    for (const Entry& e : r.entries)
        entries.push_back({{"name", e.name},
                           {"phase", engine::profile::phase_name(e.phase)},
                           {"calls_per_step", (double)e.calls / n},
                           {"ms_per_step", e.ms / n},
                           {"gflop_per_step", e.flops / n / 1e9},
                           {"mb_per_step", e.bytes / n / 1e6}});
    return {{"steps", r.steps},
            {"device", r.device == engine::Device::CUDA ? "cuda" : "cpu"},
            {"step_ms", r.step_ms / n},
            {"charged_ms", r.charged_ms() / n},
            {"entries", entries}};
}

void report_profile(const Report& r, const std::string& title, const RunDir& out) {
    std::fprintf(stderr, "%s", profile_table(r, title).c_str());
    if (out.enabled()) {
        out.write_json("profile.json", profile_json(r));
        std::fprintf(stderr, "profile: %s\n", out.path("profile.json").c_str());
    }
}

}  // namespace apps

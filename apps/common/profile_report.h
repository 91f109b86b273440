// apps/common/profile_report.h: --profile N in apps/bench, train_vit and train_lm: profile N
// training steps with the engine's profiler (engine/profile.h), then print where the time went as
// a table on stderr and as JSON (stdout for apps/bench, profile.json in the run directory for the
// training apps).
#pragma once
#include <string>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include "apps/common/run.h"
#include "engine/profile.h"

namespace apps {

// --profile N (0: off, the default).
void add_profile_flag(CLI::App& app, int& steps);

// The training apps' profiling window: the process's steps 2 .. N+1 (the first step pays one-time
// costs: the memory pool filling, OpenBLAS's threads starting). begin() before a step's work,
// end() after it; right after the window's last step finished() returns the report, once.
class ProfileWindow {
public:
    ProfileWindow(int steps, engine::Device device) : steps_(steps), device_(device) {}
    void begin();
    void end();
    const engine::profile::Report* finished();

private:
    int steps_;
    engine::Device device_;
    int64_t seen_ = 0, profiled_ = 0;  // steps begun before the window; steps profiled
    bool started_ = false, done_ = false, reported_ = false;
    engine::profile::Report report_;
};

// The table: one line per (label, phase), longest first, with calls and milliseconds per step,
// share of the step, GFLOP/s for labels with GEMM FLOPs and GB/s for the rest; then the totals
// per phase and the GEMMs' share of the step.
std::string profile_table(const engine::profile::Report& r, const std::string& title);
nlohmann::ordered_json profile_json(const engine::profile::Report& r);

// The training apps' report: the table on stderr, the JSON as profile.json in the run directory.
void report_profile(const engine::profile::Report& r, const std::string& title, const RunDir& out);

}  // namespace apps

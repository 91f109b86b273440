// tests/test_profile.cpp: the op-level profiler on the CPU (tests/profile_checks.h).
#include "tests/profile_checks.h"

TEST_CASE("profile: a step's ops, FLOPs and bytes, forward and backward apart, adding up to the step",
          "[profile]") {
    test::check_profile_of_a_small_step(engine::Device::CPU);
}

TEST_CASE("profile: stop with a step still open is an error; nothing is charged while off", "[profile]") {
    using namespace engine;
    profile::boundary("ignored", profile::Phase::Outside);  // off: no effect, no error
    profile::start(Device::CPU);
    profile::step_begin();
    CHECK_THROWS_WITH(profile::step_begin(), Catch::Contains("not ended"));
    CHECK_THROWS_WITH(profile::stop(), Catch::Contains("still open"));
    profile::step_end();
    profile::Report r = profile::stop();
    CHECK(r.steps == 1);
    CHECK(test::find_entry(r, "ignored", profile::Phase::Outside) == nullptr);
    CHECK(test::find_entry(r, "step end (sync, other)", profile::Phase::Outside) != nullptr);
}

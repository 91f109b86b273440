// tests/cuda/test_cuda_profile.cpp: the op-level profiler on the device: intervals timed with
// events on the stream (tests/profile_checks.h holds the checks, shared with the CPU test).
#include "tests/profile_checks.h"

TEST_CASE("cuda profile: a step's ops, FLOPs and bytes, timed with events, adding up to the step", "[cuda]") {
    test::check_profile_of_a_small_step(engine::Device::CUDA);
}

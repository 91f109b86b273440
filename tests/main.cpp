// tests/main.cpp: the Catch2 runner. Besides Catch2's own report it ends with one line
// "N passed, N failed" counting test cases, the line CI reads. Every test runs with fresh CPU
// memory poisoned (engine::set_poison_host_memory), and so do the apps the tests start
// (INITLAB_POISON_HOST, inherited): an op that reads what it never wrote shows NaN.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include "engine/tensor.h"

namespace {

int g_passed = 0, g_failed = 0;

struct CountingListener : Catch::TestEventListenerBase {
    using TestEventListenerBase::TestEventListenerBase;
    void testCaseEnded(const Catch::TestCaseStats& stats) override {
        if (stats.totals.assertions.failed > 0) g_failed++;
        else g_passed++;
    }
};

}  // namespace

CATCH_REGISTER_LISTENER(CountingListener)

int main(int argc, char* argv[]) {
    Catch::Session session;
    int rc = session.applyCommandLine(argc, argv);
    if (rc != 0) return rc;
    engine::set_poison_host_memory(true);
    setenv("INITLAB_POISON_HOST", "1", 1);
    rc = session.run();
    if (!session.config().listTestNamesOnly() && !session.config().listTests() && !session.config().listTags())
        std::printf("%d passed, %d failed\n", g_passed, g_failed);
    return rc;
}

// fuzz/fuzz_cifar.cpp: libFuzzer target for the CIFAR-10/100 binary reader. Any input must
// either parse into a consistent set (whole records, labels in range) or throw engine::Error.
#include <cstdint>
#include <cstdlib>
#include <string>
#include "data/cifar.h"
#include "engine/error.h"
#include "fuzz/seeds.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    // FUZZ_WRITE_SEEDS=DIR: write a few valid files as the starting corpus and exit.
    if (const char* dir = std::getenv("FUZZ_WRITE_SEEDS")) {
        fuzz::write_seed(dir, "c10.bin", fuzz::cifar_records(false, 2));
        fuzz::write_seed(dir, "c100.bin", fuzz::cifar_records(true, 2));
        std::exit(0);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t n) {
    for (data::CifarKind kind : {data::CifarKind::Cifar10, data::CifarKind::Cifar100}) {
        data::ImageSet set;
        try {
            data::parse_cifar(bytes, n, kind, "fuzz.bin", set);
        } catch (const engine::Error&) {
            if (set.n != 0 || !set.labels.empty()) std::abort();  // a failed parse must leave the set untouched
            continue;
        }
        if (set.n * data::cifar_record_bytes(kind) != (int64_t)n) std::abort();
        set.classes.assign(kind == data::CifarKind::Cifar10 ? 10 : 100, "c");
        if (kind == data::CifarKind::Cifar100) set.coarse_classes.assign(20, "c");
        set.check_consistent();  // throws (uncaught: a crash) if a label slipped through
    }
    return 0;
}

// engine/error.h: the one exception type of the engine, and a check helper that formats with fmt.
// Messages name the op and the shapes at fault: "matmul: [32,64] x [32,64]: inner dims differ".
#pragma once
#include <stdexcept>
#include <string>
#include <fmt/format.h>

namespace engine {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
    throw Error(fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
void check(bool ok, fmt::format_string<Args...> f, Args&&... args) {
    if (!ok) throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace engine

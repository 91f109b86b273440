// tests/test_tour.cpp: docs/TOUR.md names real files and real functions.
//
// The parsing rule (docs/TOUR.md follows it; its first section repeats it for writers):
//
//   1. Lines inside ``` fences are skipped. Everything below is about the other lines.
//   2. A line that begins with "**Stop " is a stop header, of the form
//          **Stop N: title** — `path/to/file.cpp` `name`, `Class::method` ...
//      N counts 1, 2, 3, ... in the order the stops appear. Every `backticked` span on a stop
//      header is a reference, read left to right:
//        - a span containing '/' is a file path relative to the repository root; it must be a
//          regular file, and it becomes the current file of the line;
//        - any other span is an identifier Name(::Name)*, Name = [A-Za-z_~][A-Za-z0-9_]*, and
//          refers to the current file (an identifier before any path is an error). Its last
//          component must occur in that file as a whole word (the characters around it are not
//          [A-Za-z0-9_]); every earlier component (a class or a namespace) must occur as a whole
//          word in that file or in its header (the same path ending in .h, when it exists).
//      A stop header needs at least one path and one identifier, and balanced backticks.
//   3. On every other line, a backticked span that looks like a repository path must exist (file
//      or folder): no whitespace, a '/', a first component that is one of the source folders
//      (apps bench data docs engine fuzz init mk nn tests tools), and none of the template
//      characters < > * { } (so `engine/cpu/<family>.cpp` is prose, not a reference).
//   4. The tour has at least 10 stops.
//
// The tour is docs/TOUR.md, or the file $INITLAB_TOUR names (to try the check on a copy:
// INITLAB_TOUR=/tmp/TOUR.md tests/run_tests "[docs]"). Paths are relative to the working
// directory: run the tests from the repository root.
#include <catch2/catch.hpp>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct Problem {
    int line;
    std::string ref, why;
};

std::string tour_path() {
    const char* env = std::getenv("INITLAB_TOUR");
    return env && *env ? env : "docs/TOUR.md";
}

bool read_text(const fs::path& path, std::string& out) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return false;
    std::stringstream ss;
    ss << f.rdbuf();
    out = ss.str();
    return true;
}

bool is_word_char(char c) { return std::isalnum((unsigned char)c) || c == '_'; }

// `word` occurs in `text` with no identifier character right before or after it.
bool has_word(const std::string& text, const std::string& word) {
    if (word.empty()) return false;
    for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
        bool left_ok = at == 0 || !is_word_char(text[at - 1]) || !is_word_char(word.front());
        size_t end = at + word.size();
        bool right_ok = end >= text.size() || !is_word_char(text[end]) || !is_word_char(word.back());
        if (left_ok && right_ok) return true;
    }
    return false;
}

// The spans between backticks; `balanced` is false when a backtick has no partner.
std::vector<std::string> backtick_spans(const std::string& line, bool& balanced) {
    std::vector<std::string> spans;
    size_t pos = 0;
    balanced = true;
    while (true) {
        size_t open = line.find('`', pos);
        if (open == std::string::npos) break;
        size_t close = line.find('`', open + 1);
        if (close == std::string::npos) {
            balanced = false;
            break;
        }
        spans.push_back(line.substr(open + 1, close - open - 1));
        pos = close + 1;
    }
    return spans;
}

std::vector<std::string> split_scope(const std::string& ident) {
    std::vector<std::string> parts;
    size_t start = 0;
    while (true) {
        size_t sep = ident.find("::", start);
        parts.push_back(ident.substr(start, sep == std::string::npos ? std::string::npos : sep - start));
        if (sep == std::string::npos) return parts;
        start = sep + 2;
    }
}

bool looks_like_repo_path(const std::string& s) {
    static const std::vector<std::string> roots = {"apps", "bench", "data", "docs", "engine", "fuzz",
                                                   "init", "mk",    "nn",   "tests", "tools"};
    if (s.find('/') == std::string::npos || s.find_first_of(" \t<>*{}") != std::string::npos) return false;
    std::string first = s.substr(0, s.find('/'));
    for (auto& r : roots)
        if (first == r) return true;
    return false;
}

// Every stale or malformed reference of the tour `text`, with paths resolved against `root`.
std::vector<Problem> check_tour(const std::string& text, const fs::path& root, int* stops_out = nullptr) {
    static const std::regex ident_re("[A-Za-z_~][A-Za-z0-9_]*(::[A-Za-z_~][A-Za-z0-9_]*)*");
    static const std::regex header_re(R"(\*\*Stop ([0-9]+): [^*]+\*\*.*)");
    std::vector<Problem> problems;
    std::istringstream in(text);
    std::string line;
    int number = 0, stops = 0, last_stop = 0;
    bool fenced = false;
    while (std::getline(in, line)) {
        number++;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("```", 0) == 0) {
            fenced = !fenced;
            continue;
        }
        if (fenced) continue;
        bool balanced = true;
        std::vector<std::string> spans = backtick_spans(line, balanced);

        if (line.rfind("**Stop ", 0) != 0) {  // rule 3: paths in prose
            for (auto& s : spans)
                if (looks_like_repo_path(s) && !fs::exists(root / s))
                    problems.push_back({number, s, "no such file or folder"});
            continue;
        }

        // Rule 2: a stop header.
        std::smatch m;
        if (!std::regex_match(line, m, header_re)) {
            problems.push_back({number, line.substr(0, 40), "stop header is not '**Stop N: title** — references'"});
            continue;
        }
        stops++;
        int n = std::stoi(m[1].str());
        if (n != last_stop + 1)
            problems.push_back({number, "Stop " + m[1].str(), "stops are numbered 1, 2, 3, ...: expected " +
                                                                   std::to_string(last_stop + 1)});
        last_stop = n;
        if (!balanced) problems.push_back({number, line.substr(0, 40), "unbalanced backtick"});
        std::string file_text, header_text;
        std::string current;
        bool have_file = false;
        int paths = 0, idents = 0;
        for (auto& s : spans) {
            if (s.find('/') != std::string::npos) {
                paths++;
                current = s;
                have_file = fs::is_regular_file(root / s) && read_text(root / s, file_text);
                if (!have_file) {
                    problems.push_back({number, s, "no such file"});
                    continue;
                }
                header_text.clear();
                fs::path header = fs::path(s).replace_extension(".h");
                if (header != fs::path(s) && fs::is_regular_file(root / header)) read_text(root / header, header_text);
                continue;
            }
            idents++;
            if (!std::regex_match(s, ident_re)) {
                problems.push_back({number, s, "not an identifier (Name or Class::method)"});
                continue;
            }
            if (current.empty()) {
                problems.push_back({number, s, "identifier before any file path on the line"});
                continue;
            }
            if (!have_file) continue;  // the path is already reported
            std::vector<std::string> parts = split_scope(s);
            if (!has_word(file_text, parts.back()))
                problems.push_back({number, s, "'" + parts.back() + "' does not appear in " + current});
            for (size_t i = 0; i + 1 < parts.size(); i++)
                if (!has_word(file_text, parts[i]) && !has_word(header_text, parts[i]))
                    problems.push_back({number, s, "'" + parts[i] + "' appears in neither " + current +
                                                       " nor its header"});
        }
        if (paths == 0) problems.push_back({number, "Stop " + m[1].str(), "names no file"});
        if (idents == 0) problems.push_back({number, "Stop " + m[1].str(), "names no function or identifier"});
    }
    if (stops_out) *stops_out = stops;
    return problems;
}

std::string describe(const std::string& file, const Problem& p) {
    return file + ":" + std::to_string(p.line) + ": `" + p.ref + "`: " + p.why;
}

}  // namespace

TEST_CASE("docs/TOUR.md: every file and function it names exists", "[docs]") {
    std::string path = tour_path(), text;
    INFO("tour " << path << " (run the tests from the repository root, or set INITLAB_TOUR)");
    REQUIRE(read_text(path, text));
    int stops = 0;
    std::vector<Problem> problems = check_tour(text, ".", &stops);
    for (auto& p : problems) FAIL_CHECK("stale reference: " << describe(path, p));
    CHECK(problems.empty());
    INFO("stop headers found: " << stops);
    CHECK(stops >= 10);
}

TEST_CASE("the tour check finds a missing file, a renamed function and a lost class", "[docs]") {
    fs::path root = fs::temp_directory_path() / ("initlab_tour_check_" + std::to_string(::getpid()));
    fs::create_directories(root / "nn");
    std::ofstream(root / "nn/layer.h") << "class Linear { Tensor forward(const Tensor& x) const; };\n";
    std::ofstream(root / "nn/layer.cpp") << "Tensor Linear::forward(const Tensor& x) const { return linear(x); }\n";
    std::string good =
        "# A tour\n"
        "**Stop 1: linear** — `nn/layer.cpp` `Linear::forward`, `linear`\n"
        "See `nn/layer.h` and `engine/cpu/<family>.cpp`.\n"
        "```\n"
        "**Stop 9: not a stop, a code block** `nn/gone.cpp`\n"
        "```\n";
    CHECK(check_tour(good, root).empty());

    std::string bad =
        "**Stop 1: renamed** — `nn/layer.cpp` `Linear::fwd`\n"    // method gone
        "**Stop 2: lost class** — `nn/layer.cpp` `Dense::forward`\n"  // class in neither file
        "**Stop 3: moved** — `nn/gone.cpp` `forward`\n"           // file gone
        "**Stop 5: skipped number** — `nn/layer.cpp` `lin`\n"     // numbering; whole words only
        "**Stop 6: no file** — `forward`\n"
        "Prose naming `nn/missing.h`.\n";
    std::vector<Problem> p = check_tour(bad, root);
    std::vector<std::string> got;
    std::string all;
    for (auto& q : p) {
        got.push_back(std::to_string(q.line) + " " + q.ref);
        all += describe("bad", q) + "\n";
    }
    INFO(all);
    CHECK(got == std::vector<std::string>{"1 Linear::fwd", "2 Dense::forward", "3 nn/gone.cpp", "4 Stop 5", "4 lin",
                                          "5 forward", "5 Stop 6", "6 nn/missing.h"});
    fs::remove_all(root);
}

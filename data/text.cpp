// data/text.cpp: vocabularies, tokenizers and corpus readers (see text.h).
#include "data/text.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include "engine/atomic_file.h"
#include "engine/error.h"

namespace fs = std::filesystem;
using engine::check;
using engine::fail;

namespace data {

// ---------------------------------------------------------------------------------------------
// Vocab

int32_t Vocab::add(std::string_view token) {
    auto it = ids_.find(token);
    if (it != ids_.end()) return it->second;
    check(!token.empty(), "vocab: empty token");
    int32_t id = (int32_t)tokens_.size();
    tokens_.emplace_back(token);
    ids_.emplace(tokens_.back(), id);
    return id;
}

int32_t Vocab::find(std::string_view token) const {
    auto it = ids_.find(token);
    return it == ids_.end() ? -1 : it->second;
}

const std::string& Vocab::token(int32_t id) const {
    check(id >= 0 && id < size(), "vocab: id {} out of range [0, {})", id, size());
    return tokens_[id];
}

Vocab Vocab::bytes() {
    Vocab v;
    for (int b = 0; b < 256; b++) v.add(std::string(1, (char)b));
    return v;
}

static std::string escape_token(const std::string& t) {
    std::string out;
    for (unsigned char c : t) {
        if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c == '\r') out += "\\r";
        else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
        else out += (char)c;
    }
    return out;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static std::string unescape_token(const std::string& line, const std::string& path, int64_t lineno) {
    std::string out;
    for (size_t i = 0; i < line.size(); i++) {
        if (line[i] != '\\') { out += line[i]; continue; }
        check(i + 1 < line.size(), "{}: line {}: dangling '\\' at the end of the token", path, lineno);
        char e = line[++i];
        if (e == '\\') out += '\\';
        else if (e == 'n') out += '\n';
        else if (e == 't') out += '\t';
        else if (e == 'r') out += '\r';
        else if (e == 'x') {
            int hi = i + 1 < line.size() ? hex_digit(line[i + 1]) : -1;
            int lo = i + 2 < line.size() ? hex_digit(line[i + 2]) : -1;
            check(hi >= 0 && lo >= 0, "{}: line {}: bad escape \\x (two hex digits expected)", path, lineno);
            out += (char)(hi * 16 + lo);
            i += 2;
        } else {
            fail("{}: line {}: unknown escape '\\{}'", path, lineno, e);
        }
    }
    return out;
}

std::string Vocab::serialize() const {
    std::string out;
    for (const std::string& t : tokens_) out += escape_token(t) + '\n';
    return out;
}

void Vocab::save(const std::string& path) const { engine::write_file_atomically(path, serialize(), "vocab"); }

Vocab Vocab::load(const std::string& path) { return parse(read_file(path), path); }

Vocab Vocab::parse(std::string_view text, const std::string& path) {
    check(!text.empty(), "vocab: {} is empty", path);
    check(text.back() == '\n', "vocab: {} does not end with a newline (truncated?)", path);
    Vocab v;
    int64_t lineno = 0;
    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find('\n', start);
        lineno++;
        std::string line(text.substr(start, end - start));
        start = end + 1;
        check(!line.empty(), "vocab: {}: line {} is empty", path, lineno);
        // save() writes a carriage return as \r: a raw one comes from a conversion of the file.
        check(line.find('\r') == std::string::npos, "vocab: {}: line {} holds a raw carriage return (CRLF line "
              "endings? save() writes it escaped)", path, lineno);
        std::string tok = unescape_token(line, path, lineno);
        check(v.find(tok) < 0, "vocab: {}: line {}: token '{}' appears twice", path, lineno, line);
        v.add(tok);
    }
    return v;
}

// ---------------------------------------------------------------------------------------------
// Tokenizers

const char* level_name(TextLevel level) {
    switch (level) {
        case TextLevel::Word: return "word";
        case TextLevel::Symbols: return "symbols";
        case TextLevel::Char: return "char";
        case TextLevel::Byte: return "byte";
    }
    return "?";
}

TextLevel parse_level(const std::string& name) {
    if (name == "word") return TextLevel::Word;
    if (name == "symbols") return TextLevel::Symbols;
    if (name == "char") return TextLevel::Char;
    if (name == "byte") return TextLevel::Byte;
    fail("text level '{}': expected word, symbols, char or byte", name);
}

std::string read_file(const std::string& path) {
    std::error_code ec;
    auto st = fs::status(path, ec);
    check(fs::exists(st), "{}: no such file", path);
    check(!fs::is_directory(st), "{}: is a directory, expected a file", path);
    std::FILE* f = std::fopen(path.c_str(), "rb");
    check(f != nullptr, "{}: cannot open for reading", path);
    std::string out;
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    bool err = std::ferror(f);
    std::fclose(f);
    check(!err, "{}: read error", path);
    return out;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

// Look `tok` up (or add it) per the unknown-token policy.
static int32_t token_id(std::string_view tok, Vocab& vocab, Unknown unknown, int32_t unk, const std::string& file,
                        int64_t lineno) {
    if (unknown == Unknown::Grow) return vocab.add(tok);
    int32_t id = vocab.find(tok);
    if (id >= 0) return id;
    if (unknown == Unknown::ToUnk) {
        check(unk >= 0, "{}: line {}: token '{}' is not in the vocabulary, which has no <unk> to map it to", file,
              lineno, tok);
        return unk;
    }
    fail("{}: line {}: token '{}' is not in the vocabulary (built from the training split), and this data set "
         "has no <unk>", file, lineno, tok);
}

static void tokenize_words(std::string_view text, const std::string& file, bool eos, Vocab& vocab, Unknown unknown,
                           std::vector<int32_t>& out) {
    int32_t unk = vocab.find("<unk>");
    int32_t eos_id = -1;
    if (eos) eos_id = unknown == Unknown::Grow ? -1 : token_id("<eos>", vocab, unknown, unk, file, 1);
    size_t i = 0, n = text.size();
    int64_t lineno = 1;
    while (i < n) {
        // One line: [i, end).
        size_t end = text.find('\n', i);
        if (end == std::string_view::npos) end = n;
        size_t j = i;
        while (j < end) {
            while (j < end && is_space(text[j])) j++;
            size_t s = j;
            while (j < end && !is_space(text[j])) j++;
            if (j > s) out.push_back(token_id(text.substr(s, j - s), vocab, unknown, unk, file, lineno));
        }
        if (eos) {
            // Grow adds "<eos>" where it first appears (the end of line 1), as the reference code does.
            if (eos_id < 0) eos_id = vocab.add("<eos>");
            out.push_back(eos_id);
        }
        i = end + 1;
        lineno++;
    }
}

// Length of the UTF-8 sequence starting at text[i], or 0 when it is not valid UTF-8.
static size_t utf8_length(std::string_view text, size_t i) {
    unsigned char c = text[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > text.size()) return 0;
    for (size_t k = 1; k < len; k++)
        if (((unsigned char)text[i + k] >> 6) != 0x2) return 0;
    // Overlong forms and code points past U+10FFFF.
    if (len == 2 && c < 0xc2) return 0;
    if (len == 3 && c == 0xe0 && (unsigned char)text[i + 1] < 0xa0) return 0;
    if (len == 4 && (c > 0xf4 || (c == 0xf0 && (unsigned char)text[i + 1] < 0x90) ||
                     (c == 0xf4 && (unsigned char)text[i + 1] >= 0x90))) return 0;
    return len;
}

static void tokenize_chars(std::string_view text, const std::string& file, Vocab& vocab, Unknown unknown,
                           std::vector<int32_t>& out) {
    int32_t unk = vocab.find("<unk>");
    int64_t lineno = 1;
    for (size_t i = 0; i < text.size();) {
        size_t len = utf8_length(text, i);
        check(len > 0, "{}: line {}, byte offset {}: not valid UTF-8 (byte 0x{:02x}); use the byte level for "
              "arbitrary bytes", file, lineno, i, (unsigned char)text[i]);
        // A CRLF line end is one character, the newline, as at the word level (where CR is space):
        // the same text saved on Windows gives the same tokens. The byte level keeps the CR.
        if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') {
            i++;
            continue;
        }
        out.push_back(token_id(text.substr(i, len), vocab, unknown, unk, file, lineno));
        if (text[i] == '\n') lineno++;
        i += len;
    }
}

std::vector<int32_t> tokenize(std::string_view text, const std::string& file, TextLevel level, Vocab& vocab,
                              Unknown unknown) {
    check(!text.empty(), "{}: file is empty", file);
    // A UTF-8 byte-order mark (Windows editors write one) is not text: it would join the first word.
    // Byte level keeps every byte as it is.
    if (level != TextLevel::Byte && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
    std::vector<int32_t> out;
    switch (level) {
        case TextLevel::Word: tokenize_words(text, file, true, vocab, unknown, out); break;
        case TextLevel::Symbols: tokenize_words(text, file, false, vocab, unknown, out); break;
        case TextLevel::Char: tokenize_chars(text, file, vocab, unknown, out); break;
        case TextLevel::Byte: {
            if (vocab.size() == 0) vocab = Vocab::bytes();
            bool is_bytes = vocab.size() == 256;
            for (int32_t b = 0; b < vocab.size() && is_bytes; b++)
                is_bytes = vocab.token(b).size() == 1 && (unsigned char)vocab.token(b)[0] == b;
            check(is_bytes,
                  "{}: byte level needs the 256-entry byte vocabulary, got one of {} tokens", file, vocab.size());
            out.reserve(text.size());
            for (unsigned char c : text) out.push_back(c);
            break;
        }
    }
    check(!out.empty(), "{}: no tokens (only whitespace)", file);
    return out;
}

// ---------------------------------------------------------------------------------------------
// Corpora

const std::vector<int32_t>& TextCorpus::split(const std::string& s) const {
    if (s == "train") return train;
    if (s == "valid") return valid;
    if (s == "test") return test;
    fail("{}: unknown split '{}' (train, valid or test)", name, s);
}

const std::vector<std::string>& corpus_names() {
    static const std::vector<std::string> names = {"ptb",           "ptb-char",        "wikitext2", "wikitext103",
                                                   "wikitext2-raw", "wikitext103-raw", "text"};
    return names;
}

// Candidate file names per split, in order of preference.
static std::vector<std::vector<std::string>> candidates(const std::string& name) {
    auto per_split = [](auto f) {
        std::vector<std::vector<std::string>> c;
        for (const char* s : {"train", "valid", "test"}) c.push_back(f(std::string(s)));
        return c;
    };
    using Names = std::vector<std::string>;
    if (name == "ptb") return per_split([](const std::string& s) { return Names{"ptb." + s + ".txt"}; });
    if (name == "ptb-char")
        return per_split([](const std::string& s) { return Names{"ptb.char." + s + ".txt"}; });
    if (name == "wikitext2" || name == "wikitext103")
        return per_split([](const std::string& s) { return Names{"wiki." + s + ".tokens", s + ".txt"}; });
    if (name == "wikitext2-raw" || name == "wikitext103-raw")
        return per_split([](const std::string& s) { return Names{"wiki." + s + ".raw", s + ".txt"}; });
    if (name == "text") return per_split([](const std::string& s) { return Names{s + ".txt"}; });
    fail("text data set '{}': unknown (known: ptb, ptb-char, wikitext2, wikitext103, wikitext2-raw, "
         "wikitext103-raw, text)", name);
}

bool is_raw_wikitext(const std::string& name) { return name == "wikitext2-raw" || name == "wikitext103-raw"; }

static std::string download_hint(const std::string& name) {
    if (name == "ptb" || name == "ptb-char" || name == "wikitext2" || name == "wikitext103")
        return fmt::format("get it with: data/download.sh {} DIR", name);
    if (is_raw_wikitext(name))
        return fmt::format("it is {}-v1.zip (wiki.{{train,valid,test}}.raw) from the WikiText release, beside the "
                           "tokenized {}; data/download.sh does not fetch it (no checksum recorded)",
                           name == "wikitext2-raw" ? "wikitext-2-raw" : "wikitext-103-raw",
                           name == "wikitext2-raw" ? "wikitext-2-v1.zip" : "wikitext-103-v1.zip");
    return "put train.txt, valid.txt and test.txt in that directory";
}

// WikiText's raw variant (wikitext-*-raw-v1: wiki.*.raw) is the untokenized text, with no <unk>:
// at word level its test words unseen in train have no id. The papers' word-level runs use the
// tokenized variant; the raw one is for char- or byte-level runs (--dataset wikitext2-raw).
static std::string raw_variant_hint(const std::string& name, const std::string& dir) {
    if ((name != "wikitext2" && name != "wikitext103") || !fs::exists(fs::path(dir) / "wiki.train.raw")) return "";
    return fmt::format(" ({} holds wiki.train.raw, the raw variant: {} reads the tokenized wiki.*.tokens; for a "
                       "char- or byte-level run on the raw text pass --dataset {}-raw)",
                       dir, name, name);
}

// One naming scheme for the three splits: the first whose training file (else any file) is in
// `dir`. Per split, wiki.train.tokens could have been paired with an unrelated valid.txt.
std::vector<std::string> corpus_files(const std::string& name, const std::string& dir) {
    const auto per_split = candidates(name);
    const size_t schemes = per_split[0].size();
    auto exists = [&](size_t split, size_t k) { return fs::exists(fs::path(dir) / per_split[split][k]); };
    size_t pick = schemes;
    for (size_t k = 0; k < schemes && pick == schemes; k++)
        if (exists(0, k)) pick = k;
    for (size_t k = 0; k < schemes && pick == schemes; k++)
        if (exists(1, k) || exists(2, k)) pick = k;
    if (pick == schemes) pick = 0;
    std::vector<std::string> files;
    for (const auto& names : per_split) files.push_back((fs::path(dir) / names[pick]).string());
    return files;
}

static void require_files(const std::string& name, const std::string& dir, const std::vector<std::string>& files,
                          bool need_train) {
    std::error_code ec;
    check(fs::is_directory(dir, ec), "{}: data directory {} does not exist; {}", name, dir, download_hint(name));
    auto names = candidates(name);
    const bool none = std::none_of(files.begin(), files.end(), [](const std::string& f) { return fs::exists(f); });
    for (size_t s = need_train ? 0 : 1; s < 3; s++) {
        if (fs::exists(files[s])) continue;
        // No file at all: every name it knows; else the split missing from the names in use.
        std::string looked = files[s];
        if (none) {
            looked.clear();
            for (const std::string& n : names[s]) looked += (looked.empty() ? "" : ", ") + (fs::path(dir) / n).string();
        }
        fail("{}: missing file (looked for {}){}; {}", name, looked, none ? raw_variant_hint(name, dir) : "",
             download_hint(name));
    }
}

// The published sizes of the corpora whose files are fixed (PTB words with an <eos> a line, PTB
// characters as symbols; ../shared/data/README.md). A copy cut short still parses: say so.
static void note_unpublished_size(const TextCorpus& c) {
    struct Size { const char* name; size_t train, valid, test; };
    for (Size s : {Size{"ptb", 929589, 73760, 82430}, Size{"ptb-char", 4975414, 389672, 438662}})
        if (c.name == s.name && (c.train.size() != s.train || c.valid.size() != s.valid || c.test.size() != s.test))
            std::fprintf(stderr, "%s: note: %s and its valid/test files hold %zu / %zu / %zu tokens, the published "
                                 "ones %zu / %zu / %zu (a partial or altered copy?)\n",
                         c.name.c_str(), c.train_file.c_str(), c.train.size(), c.valid.size(), c.test.size(), s.train,
                         s.valid, s.test);
}

TextCorpus load_corpus(const std::string& name, const std::string& dir, const CorpusOptions& opt) {
    TextCorpus c;
    c.name = name;
    c.level = name == "ptb-char" ? TextLevel::Symbols : name == "text" || is_raw_wikitext(name) ? opt.level
                                                                                                  : TextLevel::Word;
    check(!is_raw_wikitext(name) || c.level == TextLevel::Char || c.level == TextLevel::Byte,
          "{}: the raw variant is read at char or byte level, not {} (it has no <unk> for the test's unseen words; "
          "word level reads the tokenized {})", name, level_name(c.level), name.substr(0, name.size() - 4));
    std::vector<std::string> files = corpus_files(name, dir);
    require_files(name, dir, files, opt.train);
    c.train_file = files[0];
    c.valid_file = files[1];
    c.test_file = files[2];

    if (opt.vocab) c.vocab = *opt.vocab;
    else check(opt.train, "{}: reading valid/test without train needs a vocabulary", name);
    // Tokens unseen in train: <unk> where the vocabulary has one (PTB, WikiText), an error otherwise.
    auto policy = [&] { return c.vocab.find("<unk>") >= 0 ? Unknown::ToUnk : Unknown::Error; };
    if (opt.train) c.train = tokenize(read_file(c.train_file), c.train_file, c.level, c.vocab,
                                      opt.vocab ? policy() : Unknown::Grow);
    // Raw WikiText's valid/test hold a few characters its train split lacks: one <unk> symbol for
    // them, after the training split's characters (bytes need none).
    if (is_raw_wikitext(name) && c.level == TextLevel::Char && !opt.vocab) c.vocab.add("<unk>");
    c.valid = tokenize(read_file(c.valid_file), c.valid_file, c.level, c.vocab, policy());
    c.test = tokenize(read_file(c.test_file), c.test_file, c.level, c.vocab, policy());
    if (opt.train) note_unpublished_size(c);
    if (is_raw_wikitext(name) && c.level == TextLevel::Char) {
        const int32_t unk = c.vocab.find("<unk>");
        const auto unseen = [unk](const std::vector<int32_t>& v) { return std::count(v.begin(), v.end(), unk); };
        if (unseen(c.valid) + unseen(c.test) > 0)
            std::fprintf(stderr, "%s: note: characters not in the training split, read as <unk>: %td in valid, %td in "
                                 "test\n",
                         name.c_str(), unseen(c.valid), unseen(c.test));
    }
    return c;
}

}  // namespace data

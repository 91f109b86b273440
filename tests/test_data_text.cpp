// tests/test_data_text.cpp: vocabularies, tokenizers, corpus readers (files written here in the
// real formats, plus bad ones), BPTT and window batching, and the real PTB counts when present.
#include <catch2/catch.hpp>

#include "data/lm_batch.h"
#include "data/text.h"
#include "tests/test_data_helpers.h"

using Catch::Contains;
using data::TextLevel;
using data::Unknown;
using data::Vocab;
using test::error_of;
using test::TempDir;
using test::write_file;

TEST_CASE("vocab: ids in order of first appearance, save/load round trip", "[data]") {
    Vocab v;
    CHECK(v.add("the") == 0);
    CHECK(v.add("cat") == 1);
    CHECK(v.add("the") == 0);
    CHECK(v.find("cat") == 1);
    CHECK(v.find("dog") == -1);
    CHECK(v.token(1) == "cat");
    CHECK_THROWS_AS(v.token(2), engine::Error);

    TempDir dir;
    // Tokens with newline, backslash, tab, space, control and UTF-8 bytes survive the file.
    Vocab odd;
    std::vector<std::string> odd_tokens = {"a", "\n", "\\", "\t", " ", "x\\ny", std::string(1, 1), "caf\xc3\xa9",
                                           "\x7f"};
    for (const std::string& t : odd_tokens) odd.add(t);
    odd.save(dir / "vocab.txt");
    Vocab back = Vocab::load(dir / "vocab.txt");
    CHECK(back == odd);
    CHECK(back.find("\n") == 1);

    Vocab bytes = Vocab::bytes();
    REQUIRE(bytes.size() == 256);
    bytes.save(dir / "bytes.txt");
    CHECK(Vocab::load(dir / "bytes.txt") == bytes);
}

TEST_CASE("vocab: bad files name the file and the problem", "[data]") {
    TempDir dir;
    CHECK_THAT(error_of([&] { Vocab::load(dir / "nope.txt"); }), Contains("nope.txt") && Contains("no such file"));
    write_file(dir / "dup.txt", "a\nb\na\n");
    CHECK_THAT(error_of([&] { Vocab::load(dir / "dup.txt"); }), Contains("dup.txt") && Contains("line 3") &&
                                                                  Contains("twice"));
    write_file(dir / "blank.txt", "a\n\nb\n");
    CHECK_THAT(error_of([&] { Vocab::load(dir / "blank.txt"); }), Contains("line 2 is empty"));
    write_file(dir / "esc.txt", "a\\q\n");
    CHECK_THAT(error_of([&] { Vocab::load(dir / "esc.txt"); }), Contains("unknown escape"));
    write_file(dir / "hex.txt", "\\x4\n");
    CHECK_THAT(error_of([&] { Vocab::load(dir / "hex.txt"); }), Contains("bad escape"));
    write_file(dir / "trunc.txt", "a\nb");
    CHECK_THAT(error_of([&] { Vocab::load(dir / "trunc.txt"); }), Contains("truncated"));
    write_file(dir / "crlf.txt", "<eos>\r\n<unk>\r\n");
    CHECK_THAT(error_of([&] { Vocab::load(dir / "crlf.txt"); }),
               Contains("crlf.txt") && Contains("line 1") && Contains("carriage return"));
    write_file(dir / "dangling.txt", "a\nb\\\n");
    CHECK_THAT(error_of([&] { Vocab::load(dir / "dangling.txt"); }),
               Contains("dangling.txt") && Contains("line 2") && Contains("dangling"));
    write_file(dir / "empty.txt", "");
    CHECK_THAT(error_of([&] { Vocab::load(dir / "empty.txt"); }), Contains("empty.txt") && Contains("is empty"));
}

TEST_CASE("tokenize: word level adds <eos> at every line end, empty lines included", "[data]") {
    Vocab v;
    auto ids = data::tokenize("a b\n\n  c a\t \r\nb", "f.txt", TextLevel::Word, v, Unknown::Grow);
    // a b <eos> | <eos> | c a <eos> | b <eos>   (CR is whitespace; the unterminated last line counts)
    CHECK(v.tokens() == std::vector<std::string>{"a", "b", "<eos>", "c"});
    CHECK(ids == std::vector<int32_t>{0, 1, 2, 2, 3, 0, 2, 1, 2});

    // A trailing newline ends the last line; it does not open an empty one.
    Vocab w;
    CHECK(data::tokenize("x y\n", "f.txt", TextLevel::Word, w, Unknown::Grow).size() == 3);
    // A UTF-8 byte-order mark is dropped, not glued to the first word.
    Vocab bom;
    data::tokenize("\xEF\xBB\xBFx y\n", "f.txt", TextLevel::Word, bom, Unknown::Grow);
    CHECK(bom.tokens() == std::vector<std::string>{"x", "y", "<eos>"});

    // Symbols: whitespace separated, no <eos>.
    Vocab s;
    auto sym = data::tokenize("a b _ c\nd _\n", "c.txt", TextLevel::Symbols, s, Unknown::Grow);
    CHECK(sym == std::vector<int32_t>{0, 1, 2, 3, 4, 2});
    CHECK(s.find("<eos>") == -1);
}

TEST_CASE("tokenize: unknown tokens go to <unk> or fail with file, line and token", "[data]") {
    Vocab v;
    data::tokenize("<unk> a b\n", "train.txt", TextLevel::Word, v, Unknown::Grow);
    auto ids = data::tokenize("a zebra\nb\n", "valid.txt", TextLevel::Word, v, Unknown::ToUnk);
    CHECK(ids == std::vector<int32_t>{1, 0, 3, 2, 3});
    CHECK(v.size() == 4);  // not grown

    std::string e = error_of([&] { data::tokenize("a\nb zebra\n", "valid.txt", TextLevel::Word, v, Unknown::Error); });
    CHECK_THAT(e, Contains("valid.txt") && Contains("line 2") && Contains("zebra"));

    Vocab no_unk;
    data::tokenize("a b\n", "train.txt", TextLevel::Word, no_unk, Unknown::Grow);
    CHECK_THAT(error_of([&] { data::tokenize("c\n", "t.txt", TextLevel::Word, no_unk, Unknown::ToUnk); }),
               Contains("no <unk>"));
}

TEST_CASE("tokenize: char level is UTF-8 code points, byte level is bytes", "[data]") {
    Vocab v;
    auto ids = data::tokenize("h\xc3\xa9h\n\xe2\x82\xac", "u.txt", TextLevel::Char, v, Unknown::Grow);
    CHECK(ids == std::vector<int32_t>{0, 1, 0, 2, 3});
    CHECK(v.token(1) == "\xc3\xa9");
    CHECK(v.token(3) == "\xe2\x82\xac");
    // A CRLF line end is the newline alone; a CR elsewhere stays a character.
    Vocab crlf;
    CHECK(data::tokenize("h\xc3\xa9h\r\n\xe2\x82\xac", "w.txt", TextLevel::Char, crlf, Unknown::Grow) == ids);
    CHECK(data::tokenize("a\rb", "r.txt", TextLevel::Char, crlf, Unknown::Grow).size() == 3);
    for (std::string bad : {std::string("ab\xc3"), std::string("a\x80"), std::string("\xc0\xaf"),
                            std::string("\xf5\x80\x80\x80")}) {
        Vocab w;
        CHECK_THAT(error_of([&] { data::tokenize(bad, "bad.txt", TextLevel::Char, w, Unknown::Grow); }),
                   Contains("bad.txt") && Contains("not valid UTF-8"));
    }
    Vocab b;
    auto bytes = data::tokenize(std::string("A\n\xff", 3), "b.bin", TextLevel::Byte, b, Unknown::Grow);
    CHECK(bytes == std::vector<int32_t>{65, 10, 255});
    CHECK(b.size() == 256);
}

TEST_CASE("tokenize: an empty or blank file is an error naming it", "[data]") {
    Vocab v;
    CHECK_THAT(error_of([&] { data::tokenize("", "empty.txt", TextLevel::Word, v, Unknown::Grow); }),
               Contains("empty.txt") && Contains("empty"));
    CHECK_THAT(error_of([&] { data::tokenize(" \n \n", "blank.txt", TextLevel::Symbols, v, Unknown::Grow); }),
               Contains("blank.txt") && Contains("no tokens"));
}

// Three small PTB-format files.
static void write_ptb(const std::string& dir, const std::string& valid_extra = "") {
    write_file(dir + "/ptb.train.txt", " the cat sat <unk> \n the dog \n");
    write_file(dir + "/ptb.valid.txt", " the cat " + valid_extra + "\n");
    write_file(dir + "/ptb.test.txt", " dog sat \n");
}

TEST_CASE("corpus: PTB, PTB char, WikiText and plain text from files in their formats", "[data]") {
    TempDir dir;
    write_ptb(dir.path(), "emu");
    auto ptb = data::load_corpus("ptb", dir.path());
    CHECK(ptb.vocab.tokens() == std::vector<std::string>{"the", "cat", "sat", "<unk>", "<eos>", "dog"});
    CHECK(ptb.train.size() == 8);
    CHECK(ptb.valid == std::vector<int32_t>{0, 1, 3, 4});  // emu -> <unk>
    CHECK(ptb.test == std::vector<int32_t>{5, 2, 4});
    CHECK(ptb.train_file == dir / "ptb.train.txt");

    // Reading valid/test with a saved vocabulary gives the same ids.
    ptb.vocab.save(dir / "vocab.txt");
    Vocab saved = Vocab::load(dir / "vocab.txt");
    data::CorpusOptions o;
    o.vocab = &saved;
    o.train = false;
    auto again = data::load_corpus("ptb", dir.path(), o);
    CHECK(again.valid == ptb.valid);
    CHECK(again.train.empty());

    TempDir chars;
    write_file(chars / "ptb.char.train.txt", "a b _ c\n");
    write_file(chars / "ptb.char.valid.txt", "c a\n");
    write_file(chars / "ptb.char.test.txt", "b _ a\n");
    auto pc = data::load_corpus("ptb-char", chars.path());
    CHECK(pc.level == TextLevel::Symbols);
    CHECK(pc.vocab.size() == 4);
    CHECK(pc.test == std::vector<int32_t>{1, 2, 0});
    write_file(chars / "ptb.char.test.txt", "b z\n");
    CHECK_THAT(error_of([&] { data::load_corpus("ptb-char", chars.path()); }),
               Contains("ptb.char.test.txt") && Contains("'z'") && Contains("no <unk>"));

    // WikiText: both namings; the empty lines carry <eos>.
    for (bool tokens_naming : {true, false}) {
        TempDir wt;
        auto name = [&](const std::string& s) { return tokens_naming ? "wiki." + s + ".tokens" : s + ".txt"; };
        write_file(wt / name("train"), " \n = Title = \n \n x <unk> y \n");
        write_file(wt / name("valid"), " x q \n");
        write_file(wt / name("test"), " y \n");
        auto w = data::load_corpus("wikitext2", wt.path());
        CHECK(w.train.size() == 1 + 4 + 1 + 4);
        CHECK(w.valid == std::vector<int32_t>{w.vocab.find("x"), w.vocab.find("<unk>"), w.vocab.find("<eos>")});
        CHECK(w.valid_file == wt / name("valid"));
    }

    // Plain text without <unk>: an unseen word is an error; byte level never has one.
    TempDir txt;
    write_file(txt / "train.txt", "hello world\n");
    write_file(txt / "valid.txt", "hello there\n");
    write_file(txt / "test.txt", "world\n");
    CHECK_THAT(error_of([&] { data::load_corpus("text", txt.path()); }), Contains("valid.txt") && Contains("there"));
    data::CorpusOptions byte;
    byte.level = TextLevel::Byte;
    auto tb = data::load_corpus("text", txt.path(), byte);
    CHECK(tb.vocab.size() == 256);
    CHECK(tb.valid.size() == 12);
    CHECK(tb.valid[0] == 'h');
}

// The raw variant as the release lays it out (wiki.*.raw: the untokenized text, UTF-8, no <unk>,
// a space before each line's end), at char and byte level.
TEST_CASE("corpus: raw WikiText at char level, unseen characters as <unk>; byte level; not word level", "[data]") {
    TempDir raw;
    write_file(raw / "wiki.train.raw", " \n = Valkyria Chronicles III = \n \n Senj\u014d no Valkyria 3 @-@ a \n");
    write_file(raw / "wiki.valid.raw", " = Tower = \n");
    write_file(raw / "wiki.test.raw", " Senj\u014d \u00e9 \n");
    data::CorpusOptions chars;
    chars.level = TextLevel::Char;
    auto c = data::load_corpus("wikitext2-raw", raw.path(), chars);
    CHECK(c.level == TextLevel::Char);
    CHECK(c.train_file == raw / "wiki.train.raw");
    CHECK(c.train.size() == 62);  // characters, ō one of them, newlines included
    const int32_t unk = c.vocab.find("<unk>");
    REQUIRE(unk == c.vocab.size() - 1);  // after the training split's characters
    // "Tower": train has no capital T, so it is <unk>; the rest are train's characters.
    CHECK(c.valid[3] == unk);
    CHECK(c.valid[4] == c.vocab.find("o"));
    CHECK(c.test[5] == c.vocab.find("\u014d"));
    CHECK(c.test[7] == unk);  // é
    CHECK(std::count(c.train.begin(), c.train.end(), unk) == 0);
    // Valid and test again with the saved vocabulary (a checkpoint's): the same ids.
    data::CorpusOptions again = chars;
    again.vocab = &c.vocab;
    again.train = false;
    auto c2 = data::load_corpus("wikitext2-raw", raw.path(), again);
    CHECK(c2.valid == c.valid);
    CHECK(c2.test == c.test);
    // Byte level: the UTF-8 bytes, no <unk> needed.
    data::CorpusOptions bytes;
    bytes.level = TextLevel::Byte;
    auto b = data::load_corpus("wikitext103-raw", raw.path(), bytes);
    CHECK(b.vocab.size() == 256);
    CHECK(b.test.size() == std::string(" Senj\u014d \u00e9 \n").size());
    // Word level has no id for the test's unseen words: refused, pointing to the tokenized variant.
    CHECK_THAT(error_of([&] { data::load_corpus("wikitext2-raw", raw.path()); }),
               Contains("char or byte level") && Contains("tokenized wikitext2"));
    // Corrupt: a file cut inside a UTF-8 sequence, an empty split.
    write_file(raw / "wiki.test.raw", std::string(" Senj\xc5"));
    CHECK_THAT(error_of([&] { data::load_corpus("wikitext2-raw", raw.path(), chars); }),
               Contains("wiki.test.raw") && Contains("not valid UTF-8"));
    write_file(raw / "wiki.test.raw", "");
    CHECK_THAT(error_of([&] { data::load_corpus("wikitext2-raw", raw.path(), chars); }),
               Contains("wiki.test.raw") && Contains("empty"));
}

TEST_CASE("corpus: missing directory or file says where it looked and how to get the data", "[data]") {
    TempDir dir;
    CHECK_THAT(error_of([&] { data::load_corpus("ptb", dir / "none"); }),
               Contains(dir / "none") && Contains("does not exist") && Contains("download.sh ptb"));
    write_ptb(dir.path());
    std::filesystem::remove(dir / "ptb.test.txt");
    CHECK_THAT(error_of([&] { data::load_corpus("ptb", dir.path()); }),
               Contains(dir / "ptb.test.txt") && Contains("missing"));
    CHECK_THAT(error_of([&] { data::load_corpus("wikitext103", dir.path()); }),
               Contains("wiki.train.tokens") && Contains("train.txt"));
    // One naming scheme for the three splits: WikiText's train file beside a stray valid.txt is
    // read with wiki.valid.tokens, or refused without it, never with the stray file.
    TempDir mixed;
    write_file(mixed / "wiki.train.tokens", "a b\n");
    write_file(mixed / "valid.txt", "a b\n");
    write_file(mixed / "wiki.test.tokens", "a b\n");
    CHECK_THAT(error_of([&] { data::load_corpus("wikitext2", mixed.path()); }),
               Contains(mixed / "wiki.valid.tokens") && Contains("missing") && !Contains("valid.txt"));
    write_file(mixed / "wiki.valid.tokens", "b a\n");
    CHECK(data::load_corpus("wikitext2", mixed.path()).valid_file == mixed / "wiki.valid.tokens");
    // The raw variant's files alone: the error says what they are and how to read them.
    TempDir raw;
    for (const char* s : {"train", "valid", "test"}) write_file(raw / fmt::format("wiki.{}.raw", s), " = A = \n");
    CHECK_THAT(error_of([&] { data::load_corpus("wikitext103", raw.path()); }),
               Contains("wiki.train.tokens") && Contains("raw variant") && Contains("--dataset wikitext103-raw"));
    data::CorpusOptions chars;
    chars.level = TextLevel::Char;
    CHECK_THAT(error_of([&] { data::load_corpus("wikitext2-raw", dir.path(), chars); }),
               Contains("wiki.train.raw") && Contains("wikitext-2-raw-v1.zip"));
    CHECK_THAT(error_of([&] { data::load_corpus("wikitext2", dir.path()); }), !Contains("raw variant"));
    write_file(dir / "ptb.test.txt", "");
    CHECK_THAT(error_of([&] { data::load_corpus("ptb", dir.path()); }), Contains("ptb.test.txt") && Contains("empty"));
    CHECK_THROWS_AS(data::load_corpus("imagenet", dir.path()), engine::Error);
}

static std::vector<int32_t> iota_stream(int n) {
    std::vector<int32_t> s(n);
    for (int i = 0; i < n; i++) s[i] = i;
    return s;
}

TEST_CASE("bptt batches: contiguous rows, targets shifted by one, last batch shorter", "[data]") {
    // 23 tokens, 2 rows of 11 (token 22 dropped); 10 input columns in batches of 4: 4, 4, 2.
    data::BpttBatches b(iota_stream(23), 2, 4);
    REQUIRE(b.size() == 3);
    CHECK(b.row_length() == 11);
    for (int64_t i = 0; i < b.size(); i++) {
        auto tb = b.get(i);
        int64_t len = i < 2 ? 4 : 2;
        REQUIRE(tb.inputs.shape() == engine::Shape{2, len});
        REQUIRE(tb.targets.shape() == engine::Shape{2, len});
        CHECK(tb.scored == 2 * len);
        for (int64_t r = 0; r < 2; r++)
            for (int64_t t = 0; t < len; t++) {
                CHECK(tb.inputs.at({r, t}) == r * 11 + i * 4 + t);
                CHECK(tb.targets.at({r, t}) == r * 11 + i * 4 + t + 1);
                CHECK(tb.weights.at({r, t}) == 1.f);
            }
    }
    CHECK(data::BpttBatches(iota_stream(23), 2, 4, true).size() == 2);
    CHECK_THROWS_AS(b.get(3), engine::Error);
    CHECK_THROWS_AS(data::BpttBatches(iota_stream(3), 2, 4), engine::Error);
    // Sizes that give no batch are named, not an empty epoch.
    CHECK_THAT(error_of([] { data::BpttBatches(iota_stream(23), 0, 4); }), Contains("batch must be positive"));
    CHECK_THAT(error_of([] { data::BpttBatches(iota_stream(23), 2, 0); }), Contains("steps must be positive"));
    CHECK_THAT(error_of([] { data::BpttBatches(iota_stream(9), 2, 5, true); }), Contains("give no full batch"));
}

TEST_CASE("window batches: only the last part is scored, each target scored once", "[data]") {
    // One row of 31 tokens, windows of 8 scoring the last 3 (5 of context).
    const int64_t n = 31, seq = 8, scored = 3, ctx = seq - scored;
    data::WindowBatches w(iota_stream(n), 1, seq, scored);
    std::vector<int> hits(n, 0);
    for (int64_t i = 0; i < w.size(); i++) {
        auto tb = w.get(i);
        int64_t len = tb.inputs.size(1);
        CHECK(len <= seq);
        CHECK(tb.first_scored == ctx);
        CHECK(tb.scored == len - ctx);
        for (int64_t t = 0; t < len; t++) {
            CHECK(tb.targets.at({0, t}) == tb.inputs.at({0, t}) + 1);
            CHECK(tb.weights.at({0, t}) == (t >= ctx ? 1.f : 0.f));
            if (t >= ctx) hits[(int)tb.targets.at({0, t})]++;
        }
        CHECK(tb.inputs.at({0, 0}) == i * scored);
    }
    for (int64_t k = 0; k < n; k++) CHECK(hits[k] == (k >= ctx + 1 ? 1 : 0));
    // Without partial windows the trailing short ones go.
    data::WindowBatches full(iota_stream(n), 1, seq, scored, false);
    CHECK(full.size() < w.size());
    for (int64_t i = 0; i < full.size(); i++) CHECK(full.get(i).inputs.size(1) == seq);
    CHECK_THROWS_AS(data::WindowBatches(iota_stream(n), 1, 4, 5), engine::Error);
    CHECK_THAT(error_of([] { data::WindowBatches(iota_stream(8), 2, 6, 3, false); }), Contains("hold no window"));
}

TEST_CASE("real data: PTB word and char counts", "[data]") {
    std::string root = test::real_data_dir("PTB counts");
    if (root.empty()) return;
    auto ptb = data::load_corpus("ptb", root + "/ptb");
    CHECK(ptb.train.size() == 929589);
    CHECK(ptb.valid.size() == 73760);
    CHECK(ptb.test.size() == 82430);
    CHECK(ptb.vocab.size() == 10000);
    CHECK(ptb.vocab.find("<unk>") >= 0);
    auto pc = data::load_corpus("ptb-char", root + "/ptb-char");
    CHECK(pc.train.size() == 4975414);
    CHECK(pc.valid.size() == 389672);
    CHECK(pc.test.size() == 438662);
    CHECK(pc.vocab.size() == 49);
}

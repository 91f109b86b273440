// fuzz/fuzz_text.cpp: libFuzzer target for the text reader: the tokenizers at every level and
// the vocabulary file parser. Checks that re-reading a text with the vocabulary built from it
// gives the same ids, and that a parsed vocabulary survives serialize -> parse.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include "data/text.h"
#include "engine/error.h"
#include "fuzz/seeds.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    if (const char* dir = std::getenv("FUZZ_WRITE_SEEDS")) {
        fuzz::write_seed(dir, "ptb.txt", " the cat sat on the <unk> \n N years ago \n");
        fuzz::write_seed(dir, "char.txt", "a e r _ b a n k \nc a t\n");
        fuzz::write_seed(dir, "utf8.txt", "caf\xc3\xa9 \xe2\x82\xac\n\xf0\x9f\x98\x80");
        fuzz::write_seed(dir, "vocab.txt", "<unk>\n<eos>\n\\n\n\\x01\n\\\\\n");
        std::exit(0);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t n) {
    std::string_view text(reinterpret_cast<const char*>(bytes), n);
    for (data::TextLevel level : {data::TextLevel::Word, data::TextLevel::Symbols, data::TextLevel::Char,
                                  data::TextLevel::Byte}) {
        data::Vocab vocab;
        std::vector<int32_t> ids;
        try {
            ids = data::tokenize(text, "fuzz.txt", level, vocab, data::Unknown::Grow);
        } catch (const engine::Error&) {
            continue;
        }
        for (int32_t id : ids)
            if (id < 0 || id >= vocab.size()) std::abort();
        data::Vocab same = vocab;
        if (data::tokenize(text, "fuzz.txt", level, same, data::Unknown::Error) != ids) std::abort();
        if (!(same == vocab)) std::abort();
        if (!(data::Vocab::parse(vocab.serialize(), "fuzz.vocab") == vocab)) std::abort();
    }
    try {
        data::Vocab v = data::Vocab::parse(text, "fuzz.vocab");
        if (!(data::Vocab::parse(v.serialize(), "again.vocab") == v)) std::abort();
    } catch (const engine::Error&) {
    }
    return 0;
}

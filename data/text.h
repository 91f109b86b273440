// data/text.h: text corpora for language modelling: vocabularies, tokenizers and the readers
// for PTB (word and char level), WikiText-2/103 and plain text (word, UTF-8 char or byte level).
//
// A corpus is three token-id streams (train, valid, test) and the vocabulary they index.
// The vocabulary is built from the training split in order of first appearance (the
// convention of Zaremba's and PyTorch's word_language_model code), so ids are reproducible
// from the files alone. Word level appends "<eos>" at each line end, empty lines included.
//
// Tokens of valid/test that train never saw become "<unk>" where the data set has one
// (PTB, WikiText); elsewhere they are an error naming the file, line and token.
//
// Everything here reads from memory as well as from files (the *_text functions), so the fuzz
// target and the tests exercise exactly the code that reads real files.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace data {

// ---------------------------------------------------------------------------------------------
// Vocabulary: id <-> token, ids dense from 0 in order of insertion.

class Vocab {
public:
    int32_t add(std::string_view token);         // the token's id, added when new
    int32_t find(std::string_view token) const;  // -1 when absent
    const std::string& token(int32_t id) const;  // checked
    int32_t size() const { return (int32_t)tokens_.size(); }
    const std::vector<std::string>& tokens() const { return tokens_; }
    bool operator==(const Vocab& o) const { return tokens_ == o.tokens_; }

    // One token per line. Bytes < 0x20, 0x7f and '\' are written as \n \t \r \\ or \xHH, so
    // byte- and char-level vocabularies (which contain "\n" and " ") survive the round trip.
    void save(const std::string& path) const;
    static Vocab load(const std::string& path);
    std::string serialize() const;                                          // the file's contents
    static Vocab parse(std::string_view text, const std::string& name);     // `name` for messages

    // The fixed 256-entry vocabulary of byte-level models: id b is the one-byte string b.
    static Vocab bytes();

private:
    struct Hash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    std::vector<std::string> tokens_;
    std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids_;
};

// ---------------------------------------------------------------------------------------------
// Tokenizing one split.

enum class TextLevel {
    Word,     // whitespace-separated tokens, "<eos>" at each line end (PTB, WikiText, plain words)
    Symbols,  // whitespace-separated symbols, no "<eos>" (PTB char: "a e r _ b a n k")
    Char,     // UTF-8 code points, newlines included ("\n" is a token)
    Byte,     // raw bytes, fixed vocabulary of 256
};

const char* level_name(TextLevel level);
TextLevel parse_level(const std::string& name);  // word|symbols|char|byte

// What to do with a token the vocabulary does not have.
enum class Unknown {
    Grow,   // add it (building the vocabulary from train)
    ToUnk,  // map it to "<unk>", which the vocabulary must contain
    Error,  // throw, naming the file, line and token
};

// Tokenize `text` (the contents of `file`, used in messages only). Throws engine::Error when the
// text has no tokens, when a Char-level text is not valid UTF-8, or per `unknown`.
std::vector<int32_t> tokenize(std::string_view text, const std::string& file, TextLevel level, Vocab& vocab,
                              Unknown unknown);

// The whole file as bytes. Throws when it is missing, unreadable, or a directory.
std::string read_file(const std::string& path);

// ---------------------------------------------------------------------------------------------
// Corpora.

struct TextCorpus {
    std::string name;  // "ptb", "ptb-char", "wikitext2", "wikitext103", "wikitext2-raw", ..., "text"
    TextLevel level = TextLevel::Word;
    Vocab vocab;
    std::vector<int32_t> train, valid, test;
    std::string train_file, valid_file, test_file;

    const std::vector<int32_t>& split(const std::string& name) const;  // "train" | "valid" | "test"
};

struct CorpusOptions {
    TextLevel level = TextLevel::Word;  // for "text" and the raw WikiText only; the others have a fixed level
    const Vocab* vocab = nullptr;       // use this vocabulary (e.g. from a checkpoint) instead of building one
    bool train = true;                  // read the training split (valid/test alone need `vocab`)
};

// `name` is one of corpus_names(). Files expected in `dir`:
//   ptb          ptb.{train,valid,test}.txt
//   ptb-char     ptb.char.{train,valid,test}.txt
//   wikitext2, wikitext103          wiki.{train,valid,test}.tokens, or {train,valid,test}.txt
//   wikitext2-raw, wikitext103-raw  wiki.{train,valid,test}.raw, or {train,valid,test}.txt; at
//                                   CorpusOptions::level char or byte only
//   text         {train,valid,test}.txt
// A missing file is an error that says where we looked and how to get the data.
TextCorpus load_corpus(const std::string& name, const std::string& dir, const CorpusOptions& opt = {});

// The names load_corpus accepts, for --help texts.
const std::vector<std::string>& corpus_names();

// wikitext2-raw or wikitext103-raw: the untokenized text, read at char or byte level.
bool is_raw_wikitext(const std::string& name);

// The three file paths load_corpus would read for `name` in `dir` (the first naming that exists,
// or the canonical one when none does).
std::vector<std::string> corpus_files(const std::string& name, const std::string& dir);

}  // namespace data

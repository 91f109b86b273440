// data/paths.cpp: default data locations (see paths.h).
#include "data/paths.h"

#include <cstdlib>
#include "engine/error.h"

namespace data {

const std::vector<std::string>& dataset_names() {
    static const std::vector<std::string> names = {"ptb",      "ptb-char",     "wikitext2", "wikitext103",
                                                   "wikitext2-raw", "wikitext103-raw", "text", "cifar10",
                                                   "cifar100", "cifar10-jpeg", "folder"};
    return names;
}

bool is_text_dataset(const std::string& name) {
    return name == "ptb" || name == "ptb-char" || name == "wikitext2" || name == "wikitext103" ||
           name == "wikitext2-raw" || name == "wikitext103-raw" || name == "text";
}

std::string dataset_folder(const std::string& name) {
    if (name == "ptb" || name == "ptb-char" || name == "cifar10-jpeg") return name;
    if (name == "wikitext2") return "wikitext-2";
    if (name == "wikitext103") return "wikitext-103";
    if (name == "wikitext2-raw") return "wikitext-2-raw";
    if (name == "wikitext103-raw") return "wikitext-103-raw";
    if (name == "cifar10") return "cifar-10-batches-bin";
    if (name == "cifar100") return "cifar-100-binary";
    if (name == "text" || name == "folder") return "";
    engine::fail("unknown data set '{}'", name);
}

std::string default_data_dir(const std::string& name) {
    std::string folder = dataset_folder(name);
    if (folder.empty()) return "";
    const char* root = std::getenv("INITLAB_DATA");
    return std::string(root && *root ? root : "data_local") + "/" + folder;
}

}  // namespace data

// data/paths.h: where the programs look for a data set when no --data-dir is given.
//
//   $INITLAB_DATA/<folder>   when INITLAB_DATA is set (e.g. INITLAB_DATA=../shared/data)
//   data_local/<folder>      otherwise (where data/download.sh puts what it fetches)
//
// <folder> per data set: ptb, ptb-char, wikitext-2, wikitext-103, cifar-10-batches-bin,
// cifar-100-binary, cifar10-jpeg. "text" and "folder" have no default and need --data-dir.
#pragma once
#include <string>
#include <vector>

namespace data {

// Every data set name the programs accept (text ones first), for --help and checks.
const std::vector<std::string>& dataset_names();
bool is_text_dataset(const std::string& name);

// The folder name under a data root, or "" when the data set has no default location.
std::string dataset_folder(const std::string& name);

// The default directory for `name` per the rule above; "" when there is none.
std::string default_data_dir(const std::string& name);

}  // namespace data

// A Hugging Face model directory's tokenizer and generation files; see
// hf_model_files.h.
#include "runtime/checkpoint/hf_model_files.h"

#include <filesystem>

#include "core/status.h"
#include "core/strings.h"
#include "runtime/checkpoint/file_io.h"

namespace zero {

absl::StatusOr<std::vector<ModelFile>> read_hf_model_files(const std::string& dir) {
  std::vector<ModelFile> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return out;
  for (const char* name : kHfModelFileNames) {
    const std::string path = dir + "/" + name;
    // exists() follows links: a dangling one is left to the open to name.
    if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) continue;
    ZE_ASSIGN_OR_RETURN(FileReader f, FileReader::open(path));
    if (f.size() > kMaxModelFileBytes) {
      return absl::InvalidArgumentError(cat(path, ": ", f.size(), " bytes, more than the ", kMaxModelFileBytes,
                                            " a tokenizer or generation file is read with (not a ", name, "?)"));
    }
    std::string contents(static_cast<size_t>(f.size()), '\0');
    ZE_RETURN_IF_ERROR(f.read_at(0, contents.data(), contents.size()));
    out.push_back({name, std::move(contents)});
  }
  return out;
}

Json generation_config_json(const Json& config) {
  Json out = {{"_from_model_config", true}};
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    if (config.is_object() && config.contains(key) && !config.at(key).is_null()) out[key] = config.at(key);
  }
  return out;
}

}  // namespace zero

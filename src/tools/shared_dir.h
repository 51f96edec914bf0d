// Locating the read-only shared/ directory (data, models, docs) that sits next to
// the repository: it is optional, so every user must cope with "not found".
#pragma once
#include <filesystem>
#include <optional>
#include <vector>

namespace tkv {

// Where shared/ may be, in order: $TKV_SHARED, ../shared from the current
// directory, and <executable dir>/../../shared (build/turbokv -> repo/../shared).
std::vector<std::filesystem::path> shared_dir_candidates();
// The first candidate that holds `relative` (a file or directory inside shared/), if any.
std::optional<std::filesystem::path> find_shared_file(const std::filesystem::path& relative);

}  // namespace tkv

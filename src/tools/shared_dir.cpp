#include "tools/shared_dir.h"

#include <cstdlib>
#include <system_error>

namespace tkv {

std::vector<std::filesystem::path> shared_dir_candidates() {
  namespace fs = std::filesystem;
  std::vector<fs::path> c;
  if (const char* env = std::getenv("TKV_SHARED"); env && *env) c.emplace_back(env);
  c.emplace_back(fs::path("..") / "shared");
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);  // Linux; elsewhere skipped
  if (!ec && exe.has_parent_path()) c.push_back(exe.parent_path().parent_path().parent_path() / "shared");
  return c;
}

std::optional<std::filesystem::path> find_shared_file(const std::filesystem::path& relative) {
  for (const auto& dir : shared_dir_candidates()) {
    std::error_code ec;
    const auto p = dir / relative;
    if (std::filesystem::is_regular_file(p, ec) || std::filesystem::is_directory(p, ec)) return p;
  }
  return std::nullopt;
}

}  // namespace tkv

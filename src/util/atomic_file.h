// Crash-safe file replacement: bytes go to a temporary file in the target's
// directory, which is fsync'ed and renamed over the target only on commit()
// (then the directory is fsync'ed). A failure at any point (full disk, a
// kill -9, an error from the caller) leaves the old file, or none, under the
// final name, never a torn one. Used by every writer of a file that a user
// keeps: cache files, KV policies.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "util/status.h"

namespace tkv {

class AtomicWriter {
 public:
  // Creates `path`.tmp.<pid>.<random> next to `path` (O_EXCL | O_NOFOLLOW:
  // a new file, never one a link at that name points to).
  static Expected<AtomicWriter> open(const std::string& path);
  AtomicWriter(AtomicWriter&& o) noexcept;
  AtomicWriter& operator=(AtomicWriter&&) = delete;
  AtomicWriter(const AtomicWriter&) = delete;
  ~AtomicWriter();  // removes the temporary file unless committed

  Status write(const void* data, size_t n);
  // fsync, rename over the target, fsync the directory.
  Status commit();
  // Discards the temporary file (also done by the destructor).
  void abort();

  uint64_t bytes_written() const { return written_; }
  const std::string& temp_path() const { return tmp_; }
  // Fault injection for tests: every write past this many bytes fails as a
  // full disk would (ENOSPC).
  void fail_after(uint64_t bytes) { fail_after_ = bytes; }

 private:
  AtomicWriter(std::string path, std::string tmp, int fd) : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {}
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t written_ = 0;
  uint64_t fail_after_ = std::numeric_limits<uint64_t>::max();
};

// Writes a whole buffer to `path` through an AtomicWriter.
Status write_file_atomic(const std::string& path, const void* data, size_t n);

}  // namespace tkv

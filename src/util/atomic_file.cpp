#include "util/atomic_file.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <random>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

namespace tkv {

namespace {
std::string errno_text(int e) { return std::strerror(e); }
std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}
}  // namespace

Expected<AtomicWriter> AtomicWriter::open(const std::string& path) {
  if (path.empty()) return Status::Error("cannot write a file with an empty name");
  // A new file, never an existing one nor through a link someone placed at
  // the name (O_EXCL | O_NOFOLLOW); a random suffix so the name cannot be
  // predicted, and another try if it exists anyway.
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
  int err = 0;
  for (int attempt = 0; attempt < 16; ++attempt) {
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, "%08llx",
                  static_cast<unsigned long long>((salt ^ (++counter * 0x9e3779b97f4a7c15ull)) & 0xffffffffull));
    const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + suffix;
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) return AtomicWriter(path, tmp, fd);
    err = errno;
    if (err != EEXIST) return Status::Error("cannot create " + tmp + ": " + errno_text(err));
  }
  return Status::Error("cannot create a temporary file next to " + path + ": " + errno_text(err));
}

AtomicWriter::AtomicWriter(AtomicWriter&& o) noexcept
    : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), fd_(o.fd_), written_(o.written_), fail_after_(o.fail_after_) {
  o.fd_ = -1;
  o.tmp_.clear();
}

AtomicWriter::~AtomicWriter() { abort(); }

void AtomicWriter::abort() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
}

Status AtomicWriter::write(const void* data, size_t n) {
  if (fd_ < 0) return Status::Error("write to a closed file " + path_);
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    size_t chunk = std::min<size_t>(n, size_t(1) << 30);
    if (written_ + chunk > fail_after_) chunk = fail_after_ > written_ ? fail_after_ - written_ : 0;
    if (chunk == 0) return Status::Error("write failed: " + tmp_ + ": " + errno_text(ENOSPC) + " (simulated)");
    const ssize_t w = ::write(fd_, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::Error("write failed: " + tmp_ + ": " + errno_text(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
    written_ += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

Status AtomicWriter::commit() {
  if (fd_ < 0) return Status::Error("commit of a closed file " + path_);
  if (::fsync(fd_) != 0) return Status::Error("fsync failed: " + tmp_ + ": " + errno_text(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    return Status::Error("close failed: " + tmp_ + ": " + errno_text(errno));
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    return Status::Error("cannot rename " + tmp_ + " to " + path_ + ": " + errno_text(errno));
  tmp_.clear();
  // The rename itself is durable once the directory is.
  const int dfd = ::open(dir_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

Status write_file_atomic(const std::string& path, const void* data, size_t n) {
  auto w = AtomicWriter::open(path);
  if (!w) return w.status();
  if (Status s = w->write(data, n); !s.ok()) return s;
  return w->commit();
}

}  // namespace tkv

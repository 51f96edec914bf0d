#include "util/atomic_file.h"

#include <algorithm>
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
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error("cannot create " + tmp + ": " + errno_text(errno));
  return AtomicWriter(path, tmp, fd);
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

// Large zero-initialised buffers backed by transparent huge pages where the
// kernel allows (madvise mode): long KV streams then cost one TLB entry per
// 2 MiB instead of per 4 KiB, which matters at bandwidth speed.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tkv {

class HugeBuffer {
 public:
  HugeBuffer() = default;
  explicit HugeBuffer(size_t bytes);
  ~HugeBuffer();
  HugeBuffer(HugeBuffer&& o) noexcept : p_(o.p_), n_(o.n_), mapped_(o.mapped_) { o.p_ = nullptr; o.n_ = 0; }
  HugeBuffer& operator=(HugeBuffer&& o) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  uint8_t* data() { return p_; }
  const uint8_t* data() const { return p_; }
  size_t size() const { return n_; }
  // Maps [offset, offset + n) in one call instead of one page fault per page
  // (before filling it from a file); a hint, ignored where unsupported.
  void prefault(size_t offset, size_t n);

 private:
  void release();
  uint8_t* p_ = nullptr;
  size_t n_ = 0;
  size_t mapped_ = 0;
};

}  // namespace tkv

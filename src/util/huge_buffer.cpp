#include "util/huge_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>

namespace tkv {

HugeBuffer::HugeBuffer(size_t bytes) : n_(bytes) {
  if (bytes == 0) return;
  const size_t huge = size_t(2) << 20, page = 4096;
  // Huge pages for the whole 2 MiB pages of the buffer, 4 KiB pages for the
  // tail: the kernel zeroes a whole huge page on its first touch, and a
  // 0.5 MiB layer buffer rounded up to one cost 4x its size in zeroing
  // (loading an 8K-token ref-5m cache file spent 55% of its time in
  // clear_page; perf, RESULTS §9).
  mapped_ = (bytes + page - 1) / page * page;
  void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (mapped_ >= huge) madvise(p, mapped_ / huge * huge, MADV_HUGEPAGE);  // a hint: ignored where THP is off
#endif
  p_ = static_cast<uint8_t*>(p);
}

void HugeBuffer::prefault(size_t offset, size_t n) {
#ifdef MADV_POPULATE_WRITE
  if (!p_ || offset >= mapped_ || n == 0) return;
  const size_t page = 4096;
  const size_t lo = offset / page * page, hi = std::min(mapped_, (offset + n + page - 1) / page * page);
  madvise(p_ + lo, hi - lo, MADV_POPULATE_WRITE);
#else
  (void)offset;
  (void)n;
#endif
}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& o) noexcept {
  if (this != &o) {
    release();
    p_ = o.p_;
    n_ = o.n_;
    mapped_ = o.mapped_;
    o.p_ = nullptr;
    o.n_ = o.mapped_ = 0;
  }
  return *this;
}

void HugeBuffer::release() {
  if (p_) munmap(p_, mapped_);
  p_ = nullptr;
}

HugeBuffer::~HugeBuffer() { release(); }

}  // namespace tkv

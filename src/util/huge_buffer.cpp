#include "util/huge_buffer.h"

#include <sys/mman.h>

#include <new>

namespace tkv {

HugeBuffer::HugeBuffer(size_t bytes) : n_(bytes) {
  if (bytes == 0) return;
  const size_t huge = size_t(2) << 20;
  mapped_ = (bytes + huge - 1) / huge * huge;
  void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, mapped_, MADV_HUGEPAGE);  // a hint: ignored where THP is off
#endif
  p_ = static_cast<uint8_t*>(p);
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

// One thread streaming a GGUF file's bytes as F16 rows through the float-row
// decode's loop (four FMA chains of vcvtph2ps'd weights times an activation),
// with a software prefetch pf bytes ahead (0: none) into L1 (HINT=_MM_HINT_T0)
// or L2 (HINT=_MM_HINT_T1), from the file's mapping and from anonymous
// memory with and without huge pages (RESULTS §44: the L2 prefetch).
//   g++ -O2 -mavx512f -mf16c -mfma -DHINT=_MM_HINT_T1 scripts/harness/stream_f16.cpp -o /tmp/stream_f16
//   /tmp/stream_f16 m-F16.gguf 5632      # row width in F16 values
//   /tmp/stream_f16 m-F16.gguf 5632 f16x # activations read as f16 (RESULTS §49)
#include <immintrin.h>
#ifndef HINT
#define HINT _MM_HINT_T0
#endif
#include <sys/mman.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
static float dot(const uint16_t* w, const float* x, long n, long pf) {
  __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0;
  for (long c=0;c<n;c+=64){
    if (pf>0){ _mm_prefetch((const char*)(w+c)+pf,HINT); _mm_prefetch((const char*)(w+c)+pf+64,HINT);}
    a0=_mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(w+c))),_mm512_loadu_ps(x+c),a0);
    a1=_mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(w+c+16))),_mm512_loadu_ps(x+c+16),a1);
    a2=_mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(w+c+32))),_mm512_loadu_ps(x+c+32),a2);
    a3=_mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(w+c+48))),_mm512_loadu_ps(x+c+48),a3);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0,a1),_mm512_add_ps(a2,a3)));
}
static float dot16(const uint16_t* w, const uint16_t* x, long n, long pf) {
  __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0;
  for (long c=0;c<n;c+=64){
    if (pf>0){ _mm_prefetch((const char*)(w+c)+pf,HINT); _mm_prefetch((const char*)(w+c)+pf+64,HINT);}
    for (int k=0;k<4;k++){
      const __m512 wv=_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(w+c+16*k)));
      const __m512 xv=_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(x+c+16*k)));
      __m512& a = k==0?a0:k==1?a1:k==2?a2:a3;
      a=_mm512_fmadd_ps(wv,xv,a);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0,a1),_mm512_add_ps(a2,a3)));
}
int main(int argc,char**argv){
  const bool f16x = argc == 4 && strcmp(argv[3], "f16x") == 0;
  if ((argc != 3 && !f16x) || atol(argv[2]) <= 0 || atol(argv[2]) % 64 != 0) {
    fprintf(stderr, "usage: %s FILE COLS [f16x] (COLS a positive multiple of 64)\n", argv[0]);
    return 2;
  }
  int fd=open(argv[1],O_RDONLY); struct stat st;
  if (fd < 0 || fstat(fd,&st) != 0 || st.st_size < (1 << 21)) { fprintf(stderr, "%s: cannot read, or under 2 MiB\n", argv[1]); return 2; }
  size_t sz=st.st_size & ~((size_t)(1<<20)-1);
  const uint8_t* m=(const uint8_t*)mmap(nullptr,st.st_size,PROT_READ,MAP_PRIVATE,fd,0);
  uint8_t* a=(uint8_t*)aligned_alloc(1<<21,sz); madvise(a,sz,MADV_HUGEPAGE); memcpy(a,m,sz);
  uint8_t* b=(uint8_t*)aligned_alloc(1<<21,sz); madvise(b,sz,MADV_NOHUGEPAGE); memcpy(b,m,sz);
  long cols=atol(argv[2]); std::vector<float> x(cols,0.001f); std::vector<uint16_t> x16(cols,0x1419); volatile float sink=0;
  for(int rep=0;rep<3;rep++) for(int which=0;which<3;which++) for(long pf: {0L,6144L}){
    const uint8_t* base= which==0?m: which==1?a:b;
    auto t0=std::chrono::steady_clock::now();
    for(size_t off=0; off+cols*2<=sz; off+=cols*2) sink+= f16x ? dot16((const uint16_t*)(base+off),x16.data(),cols,pf) : dot((const uint16_t*)(base+off),x.data(),cols,pf);
    double s=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count();
    printf("%s pf %5ld: %.1f GB/s\n", which==0?"mmap ":which==1?"anonHP":"anon4K", pf, sz/s/1e9);
  }
}

// Instruction rate of the dot-product instructions on AVX-512 (RESULTS §48):
// 12 independent chains of vfmadd231ps, vpdpwssd and vpdpbusd on zmm, G
// instructions a second. Build: g++ -O2 -march=native scripts/harness/dot_peak.cpp
#include <immintrin.h>
#include <chrono>
#include <cstdio>
static double now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
#define R12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
int main(){
  const long N=100000000;
  for(int r=0;r<3;r++){
  {__m512 w=_mm512_set1_ps(1.0001f), x=_mm512_set1_ps(0.9999f);
#define D(i) __m512 a##i=_mm512_set1_ps(i);
  R12(D)
  double t=now();
  for(long n=0;n<N;n++){
#define F(i) a##i=_mm512_fmadd_ps(w,x,a##i);
   R12(F)
   __asm__ volatile(""::"v"(a0),"v"(a1),"v"(a2),"v"(a3),"v"(a4),"v"(a5),"v"(a6),"v"(a7),"v"(a8),"v"(a9),"v"(a10),"v"(a11));
  }
  t=now()-t; 
  printf("fma    %.2f G/s (%g)\n", N*12/t/1e9, _mm512_reduce_add_ps(_mm512_add_ps(a0,a11)));}
  {__m512i w=_mm512_set1_epi16(3), x=_mm512_set1_epi16(5);
#define E(i) __m512i b##i=_mm512_set1_epi32(i);
  R12(E)
  double t=now();
  for(long n=0;n<N;n++){
#define G(i) b##i=_mm512_dpwssd_epi32(b##i,w,x);
   R12(G)
   __asm__ volatile(""::"v"(b0),"v"(b1),"v"(b2),"v"(b3),"v"(b4),"v"(b5),"v"(b6),"v"(b7),"v"(b8),"v"(b9),"v"(b10),"v"(b11));
  }
  t=now()-t;
  printf("dpwssd %.2f G/s (%d)\n", N*12/t/1e9, _mm512_reduce_add_epi32(_mm512_add_epi32(b0,b11)));}
  {__m512i w=_mm512_set1_epi16(3), x=_mm512_set1_epi16(5);
  R12(E)
  double t=now();
  for(long n=0;n<N;n++){
#define H(i) b##i=_mm512_dpbusd_epi32(b##i,w,x);
   R12(H)
   __asm__ volatile(""::"v"(b0),"v"(b1),"v"(b2),"v"(b3),"v"(b4),"v"(b5),"v"(b6),"v"(b7),"v"(b8),"v"(b9),"v"(b10),"v"(b11));
  }
  t=now()-t;
  printf("dpbusd %.2f G/s (%d)\n", N*12/t/1e9, _mm512_reduce_add_epi32(_mm512_add_epi32(b0,b11)));}
  }
}

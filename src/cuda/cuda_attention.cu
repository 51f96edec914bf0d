// Fused attention on compressed rows, on the GPU (the CPU's plan in
// attention.cpp, reshaped for thread blocks):
//   1. prepare: each query rotated into K's coding domain (flat rotation),
//      times K's coord_scale and the softmax scale; q·mu_k when K is centred.
//   2. tiles: a block takes one KV head, a tile of query tokens (all G query
//      heads of the group, up to 16 query rows) and one split of the context.
//      It decodes 32 K rows and 32 V rows at a time into shared memory (each
//      row read once for every query of the tile), scores them, updates an
//      online softmax per query row, and accumulates V in V's coding domain.
//      Decode (one query token) splits the context over enough blocks to
//      fill the GPU; a prefill's query tiles fill it without splits.
//   3. merge: per query row, the splits' (max, sum, accumulator) merged by
//      log-sum-exp, times V's coord_scale, rotated back (flat rotation), plus
//      mu_v; the log of the denominator is written when asked (lse).
#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"

namespace tkv::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps
constexpr int kTile = 32;      // keys per tile (one per lane in the softmax step)
constexpr int kMaxRows = 16;   // query rows (tokens x group heads) per block
constexpr int kMaxDp = 256;    // padded head dim
constexpr int kMaxAcc = kMaxRows * kMaxDp / kThreads;

// Where row (t, h) lives (KvRows, resolved).
struct DevRows {
  const uint8_t* base;
  size_t ts, hs;
  const int32_t* blocks;
  int shift;
  size_t block_bytes;
  __device__ const uint8_t* at(int t, int h) const {
    if (!blocks) return base + static_cast<size_t>(t) * ts + static_cast<size_t>(h) * hs;
    return base + static_cast<size_t>(blocks[t >> shift]) * block_bytes +
           static_cast<size_t>(t & ((1 << shift) - 1)) * ts + static_cast<size_t>(h) * hs;
  }
};

struct Params {
  int n_q, n_q_heads, n_kv, n_kv_heads, d, dp, G, tq, splits;
  int causal_offset, window, kv_begin, causal_lag;
  float scale;
  DevRows k, v;
  const FlatFormat* kf;  // [nkf] (per KV head when nkf > 1)
  const FlatFormat* vf;
  int nkf, nvf;
  const float* kt;       // tables
  const float* vt;
  const float* q;        // [n_q][Hq][d]
  const float* mu_k;     // [H][d] or null
  const float* mu_v;
  float* qp;             // [n_q][Hq][dp] prepared queries
  float* qmu;            // [n_q][Hq]
  float* pm;             // [splits][n_q][Hq]
  float* pl;
  float* pacc;           // [splits][n_q][Hq][dp]
  float* out;            // [n_q][Hq][d]
  float* lse;            // [n_q][Hq] or null
};

__device__ inline int q_limit(const Params& p, int i) {
  return p.causal_offset < 0 ? p.n_kv : min(p.n_kv, p.causal_offset + i + 1 - p.causal_lag);
}
__device__ inline int q_start(const Params& p, int i) {
  return max(p.kv_begin, p.window > 0 ? max(0, p.causal_offset + i + 1 - p.window) : 0);
}

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// 1. One block per (token, query head).
__global__ void __launch_bounds__(kThreads) prepare_kernel(Params p) {
  __shared__ float x[kMaxDp], y[kMaxDp];
  __shared__ FlatFormat f;
  const int row = blockIdx.x, hq = row % p.n_q_heads, h = hq / p.G;
  const BlockCtx c{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
  if (threadIdx.x == 0) f = p.kf[p.nkf > 1 ? h : 0];
  const float* q = p.q + static_cast<size_t>(row) * p.d;
  for (int e = threadIdx.x; e < p.d; e += blockDim.x) x[e] = q[e];
  __syncthreads();
  flat::rotate_forward(c, f, p.kt, x, y);
  float* dst = p.qp + static_cast<size_t>(row) * p.dp;
  for (int e = threadIdx.x; e < p.dp; e += blockDim.x) {
    float v = 0.0f;
    if (e < p.d) {
      v = y[e] * p.scale;
      if (f.coord_scale >= 0) v *= p.kt[f.coord_scale + e];
    }
    dst[e] = v;
  }
  if (threadIdx.x == 0) {
    float s = 0.0f;
    if (p.mu_k)
      for (int e = 0; e < p.d; ++e) s += q[e] * p.mu_k[h * p.d + e];
    p.qmu[row] = s * p.scale;
  }
}

// 2. Grid (KV head, query tile, split).
__global__ void __launch_bounds__(kThreads) tile_kernel(Params p) {
  extern __shared__ float sh[];
  __shared__ FlatFormat fk, fv;
  __shared__ int rstart[kMaxRows], rlimit[kMaxRows];
  __shared__ float rmax[kMaxRows], rsum[kMaxRows], rcorr[kMaxRows], rqmu[kMaxRows];
  const int h = blockIdx.x, G = p.G, dp = p.dp, tid = threadIdx.x;
  const int i0 = blockIdx.y * p.tq;
  const int tq = min(p.tq, p.n_q - i0);
  const int QR = p.tq * G;  // rows beyond tq * G are idle
  float* Qs = sh;                         // [QR][dp]
  float* Ks = Qs + QR * dp;               // [kTile][dp + 1]
  float* Vs = Ks + kTile * (dp + 1);      // [kTile][dp]
  float* S = Vs + kTile * dp;             // [QR][kTile + 1]
  float* ksc = S + QR * (kTile + 1);      // [kTile]
  float* vsc = ksc + kTile;               // [kTile]

  if (tid == 0) {
    fk = p.kf[p.nkf > 1 ? h : 0];
    fv = p.vf[p.nvf > 1 ? h : 0];
  }
  for (int r = tid; r < QR; r += kThreads) {
    const int i = i0 + r / G, hq = h * G + r % G;
    const bool ok = r / G < tq;
    rstart[r] = ok ? q_start(p, i) : 0;
    rlimit[r] = ok ? q_limit(p, i) : 0;
    rmax[r] = -INFINITY;
    rsum[r] = 0.0f;
    rqmu[r] = ok ? p.qmu[static_cast<size_t>(i) * p.n_q_heads + hq] : 0.0f;
  }
  for (int e = tid; e < QR * dp; e += kThreads) {
    const int r = e / dp, c = e % dp;
    const int i = i0 + r / G, hq = h * G + r % G;
    Qs[e] = r / G < tq ? p.qp[(static_cast<size_t>(i) * p.n_q_heads + hq) * dp + c] : 0.0f;
  }
  // Keys any row of the tile sees: limits and starts grow with the token.
  const int lo = q_start(p, i0), hi = q_limit(p, i0 + tq - 1);
  const int ntiles = hi > lo ? (hi - lo + kTile - 1) / kTile : 0;
  const int per = (ntiles + p.splits - 1) / p.splits;
  const int tile0 = blockIdx.z * per, tile1 = min(ntiles, tile0 + per);
  float acc[kMaxAcc];
#pragma unroll
  for (int k = 0; k < kMaxAcc; ++k) acc[k] = 0.0f;
  __syncthreads();

  for (int tile = tile0; tile < tile1; ++tile) {
    const int t0 = lo + tile * kTile;
    // Decode K and V rows into shared memory (coding domain, before row scale).
    for (int e = tid; e < kTile * dp; e += kThreads) {
      const int j = e / dp, c = e % dp, t = t0 + j;
      float kv = 0.0f, vv = 0.0f;
      if (t < hi) {
        kv = flat::decode_coord(fk, p.kt, p.k.at(t, h), c);
        vv = flat::decode_coord(fv, p.vt, p.v.at(t, h), c);
      }
      Ks[j * (dp + 1) + c] = kv;
      Vs[j * dp + c] = vv;
    }
    if (tid < kTile) {
      const int t = t0 + tid;
      ksc[tid] = t < hi ? flat::row_scale(fk, p.k.at(t, h)) : 0.0f;
      vsc[tid] = t < hi ? flat::row_scale(fv, p.v.at(t, h)) : 0.0f;
    }
    __syncthreads();
    // Scores of every (query row, key) pair of the tile.
    for (int e = tid; e < QR * kTile; e += kThreads) {
      const int r = e / kTile, j = e % kTile, t = t0 + j;
      float s = -INFINITY;
      if (t >= rstart[r] && t < rlimit[r]) {
        const float* qr = Qs + r * dp;
        const float* kr = Ks + j * (dp + 1);
        float dot = 0.0f;
        for (int c = 0; c < dp; ++c) dot = fmaf(qr[c], kr[c], dot);
        s = fmaf(dot, ksc[j], rqmu[r]);
      }
      S[r * (kTile + 1) + j] = s;
    }
    __syncthreads();
    // Online softmax: a warp per query row, a lane per key.
    const int warp = tid / 32, lane = tid % 32;
    for (int r = warp; r < QR; r += kThreads / 32) {
      const float s = S[r * (kTile + 1) + lane];
      const float m_old = rmax[r];
      const float m_new = fmaxf(m_old, warp_max(s));
      const float pr = m_new == -INFINITY ? 0.0f : expf(s - m_new);
      const float corr = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
      S[r * (kTile + 1) + lane] = pr * vsc[lane];
      const float sum = warp_sum(pr);
      __syncwarp();
      if (lane == 0) {
        rsum[r] = rsum[r] * corr + sum;
        rmax[r] = m_new;
        rcorr[r] = corr;
      }
    }
    __syncthreads();
    // Accumulate V: each thread owns (row, coordinate) pairs.
#pragma unroll
    for (int k = 0; k < kMaxAcc; ++k) {
      const int e = tid + k * kThreads;
      if (e >= QR * dp) break;
      const int r = e / dp, c = e % dp;
      const float* pr = S + r * (kTile + 1);
      float a = acc[k] * rcorr[r];
      for (int j = 0; j < kTile; ++j) a = fmaf(pr[j], Vs[j * dp + c], a);
      acc[k] = a;
    }
    __syncthreads();
  }
  // Partials of this split.
  const size_t split_off = static_cast<size_t>(blockIdx.z) * p.n_q * p.n_q_heads;
#pragma unroll
  for (int k = 0; k < kMaxAcc; ++k) {
    const int e = tid + k * kThreads;
    if (e >= QR * dp) break;
    const int r = e / dp, c = e % dp;
    if (r / G >= tq) continue;
    const size_t row = split_off + static_cast<size_t>(i0 + r / G) * p.n_q_heads + h * G + r % G;
    p.pacc[row * dp + c] = acc[k];
  }
  for (int r = tid; r < QR; r += kThreads) {
    if (r / G >= tq) continue;
    const size_t row = split_off + static_cast<size_t>(i0 + r / G) * p.n_q_heads + h * G + r % G;
    p.pm[row] = rmax[r];
    p.pl[row] = rsum[r];
  }
}

// 3. One block per (token, query head).
__global__ void __launch_bounds__(kThreads) merge_kernel(Params p) {
  __shared__ float y[kMaxDp], x[kMaxDp];
  __shared__ float wsplit[256];
  __shared__ float total;
  __shared__ FlatFormat f;
  const int row = blockIdx.x, hq = row % p.n_q_heads, h = hq / p.G;
  const size_t stride = static_cast<size_t>(p.n_q) * p.n_q_heads;
  const BlockCtx c{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
  if (threadIdx.x == 0) {
    f = p.vf[p.nvf > 1 ? h : 0];
    float m = -INFINITY;
    for (int s = 0; s < p.splits; ++s) m = fmaxf(m, p.pm[s * stride + row]);
    float l = 0.0f;
    for (int s = 0; s < p.splits; ++s) {
      const float ms = p.pm[s * stride + row];
      wsplit[s] = ms == -INFINITY ? 0.0f : expf(ms - m);
      l += wsplit[s] * p.pl[s * stride + row];
    }
    total = l;
    if (p.lse) p.lse[row] = l > 0.0f ? m + logf(l) : -INFINITY;
  }
  __syncthreads();
  float* o = p.out + static_cast<size_t>(row) * p.d;
  if (!(total > 0.0f)) {  // nothing visible: zeros
    for (int e = threadIdx.x; e < p.d; e += blockDim.x) o[e] = 0.0f;
    return;
  }
  for (int e = threadIdx.x; e < p.d; e += blockDim.x) {
    float a = 0.0f;
    for (int s = 0; s < p.splits; ++s)
      if (wsplit[s] > 0.0f) a += wsplit[s] * p.pacc[(s * stride + row) * p.dp + e];
    a /= total;
    if (f.coord_scale >= 0) a *= p.vt[f.coord_scale + e];
    y[e] = a;
  }
  __syncthreads();
  flat::rotate_inverse(c, f, p.vt, y, x);
  for (int e = threadIdx.x; e < p.d; e += blockDim.x) o[e] = x[e] + (p.mu_v ? p.mu_v[h * p.d + e] : 0.0f);
}

size_t tile_shared_bytes(int QR, int dp) {
  return sizeof(float) * (static_cast<size_t>(QR) * dp + kTile * (dp + 1) + kTile * dp + QR * (kTile + 1) + 2 * kTile);
}

int sm_count() {
  static int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 1;
    return v;
  }();
  return n;
}

// Device state of one attention problem: rows, formats, queries, scratch.
struct Problem {
  DeviceFormats kf, vf;
  DeviceBuffer k, v, kblocks, vblocks, q, mu_k, mu_v, qp, qmu, pm, pl, pacc, out, lse;
  Params p{};
  dim3 grid;
  size_t shared = 0;
};

size_t rows_extent(const KvRows& r, int n_kv, int H, size_t ts, size_t hs) {
  const size_t rb = r.codec->row_bytes();
  if (n_kv == 0) return 0;
  if (r.blocks) {
    if (r.end) return static_cast<size_t>(r.end - r.data);
    int32_t maxb = 0;
    for (int b = 0; b <= (n_kv - 1) >> r.block_shift; ++b) maxb = std::max(maxb, r.blocks[b]);
    return (static_cast<size_t>(maxb) + 1) * r.block_bytes;
  }
  return static_cast<size_t>(n_kv - 1) * ts + static_cast<size_t>(H - 1) * hs + rb;
}

Status upload_rows(const KvRows& r, const AttentionArgs& a, DeviceBuffer& data, DeviceBuffer& blocks, DevRows& dr) {
  const size_t rb = r.codec->row_bytes();
  const size_t ts = r.token_stride ? r.token_stride : a.n_kv_heads * rb;
  const size_t hs = r.head_stride ? r.head_stride : rb;
  TKV_TRY(data.upload(r.data, rows_extent(r, a.n_kv, a.n_kv_heads, ts, hs)));
  dr = {data.as<uint8_t>(), ts, hs, nullptr, r.block_shift, r.block_bytes};
  if (r.blocks && a.n_kv > 0) {
    TKV_TRY(blocks.upload(r.blocks, sizeof(int32_t) * (((a.n_kv - 1) >> r.block_shift) + 1)));
    dr.blocks = blocks.as<int32_t>();
  }
  return Status::Ok();
}

Status check_cuda_args(const AttentionArgs& a) {
  TKV_TRY(check_attention_args(a));
  if (a.sparse_v != 0.0f) return Status::Error("attention on CUDA: sparse V is not implemented (sparse_v must be 0)");
  if (a.sinks) return Status::Error("attention on CUDA: attention sinks are not implemented yet (sinks must be null)");
  if (a.d > kMaxDp) return Status::Error("attention on CUDA: head dim " + std::to_string(a.d) + " is above 256");
  const int G = a.n_q_heads / a.n_kv_heads;
  if (G > kMaxRows)
    return Status::Error("attention on CUDA: GQA group of " + std::to_string(G) + " query heads is above 16");
  return Status::Ok();
}

// Uploads everything of a (rows, queries, means) and sizes the launch.
Status setup(const AttentionArgs& a, Problem& pr) {
  TKV_TRY(check_cuda_args(a));
  Params& p = pr.p;
  p.n_q = a.n_q;
  p.n_q_heads = a.n_q_heads;
  p.n_kv = a.n_kv;
  p.n_kv_heads = a.n_kv_heads;
  p.d = a.d;
  p.dp = (a.d + 31) / 32 * 32;
  p.G = a.n_q_heads / a.n_kv_heads;
  p.tq = std::min(std::max(1, kMaxRows / p.G), a.n_q);
  p.causal_offset = a.causal_offset;
  p.window = a.window;
  p.kv_begin = a.kv_begin;
  p.causal_lag = a.causal_lag;
  p.scale = a.scale > 0 ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.d)));
  TKV_TRY(pr.kf.build(a.k.heads, a.k.codec, a.n_kv_heads));
  TKV_TRY(pr.vf.build(a.v.heads, a.v.codec, a.n_kv_heads));
  p.kf = pr.kf.dev();
  p.vf = pr.vf.dev();
  p.nkf = pr.kf.count;
  p.nvf = pr.vf.count;
  p.kt = pr.kf.tab();
  p.vt = pr.vf.tab();
  TKV_TRY(upload_rows(a.k, a, pr.k, pr.kblocks, p.k));
  TKV_TRY(upload_rows(a.v, a, pr.v, pr.vblocks, p.v));
  const size_t nrows = static_cast<size_t>(a.n_q) * a.n_q_heads;
  TKV_TRY(pr.q.upload(a.q, sizeof(float) * nrows * a.d));
  p.q = pr.q.as<float>();
  if (a.mu_k) {
    TKV_TRY(pr.mu_k.upload(a.mu_k, sizeof(float) * a.n_kv_heads * a.d));
    p.mu_k = pr.mu_k.as<float>();
  }
  if (a.mu_v) {
    TKV_TRY(pr.mu_v.upload(a.mu_v, sizeof(float) * a.n_kv_heads * a.d));
    p.mu_v = pr.mu_v.as<float>();
  }
  // Splits: enough blocks for 4 per SM, at most one per tile of keys.
  const int qtiles = (a.n_q + p.tq - 1) / p.tq;
  const long long blocks = static_cast<long long>(a.n_kv_heads) * qtiles;
  const int key_tiles = std::max(1, (a.n_kv + kTile - 1) / kTile);
  p.splits = static_cast<int>(std::clamp<long long>((4LL * sm_count() + blocks - 1) / blocks, 1, std::min(key_tiles, 256)));
  TKV_TRY(pr.qp.alloc(sizeof(float) * nrows * p.dp));
  TKV_TRY(pr.qmu.alloc(sizeof(float) * nrows));
  TKV_TRY(pr.pm.alloc(sizeof(float) * nrows * p.splits));
  TKV_TRY(pr.pl.alloc(sizeof(float) * nrows * p.splits));
  TKV_TRY(pr.pacc.alloc(sizeof(float) * nrows * p.splits * p.dp));
  TKV_TRY(pr.out.alloc(sizeof(float) * nrows * a.d));
  p.qp = pr.qp.as<float>();
  p.qmu = pr.qmu.as<float>();
  p.pm = pr.pm.as<float>();
  p.pl = pr.pl.as<float>();
  p.pacc = pr.pacc.as<float>();
  p.out = pr.out.as<float>();
  if (a.lse) {
    TKV_TRY(pr.lse.alloc(sizeof(float) * nrows));
    p.lse = pr.lse.as<float>();
  }
  if (qtiles > 65535) return Status::Error("attention on CUDA: " + std::to_string(a.n_q) + " queries in one call is above the grid limit");
  pr.grid = dim3(a.n_kv_heads, qtiles, p.splits);
  pr.shared = tile_shared_bytes(p.tq * p.G, p.dp);
  TKV_CUDA_TRY(cudaFuncSetAttribute(tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(pr.shared)));
  return Status::Ok();
}

Status launch(const Problem& pr, cudaStream_t stream) {
  const int nrows = pr.p.n_q * pr.p.n_q_heads;
  prepare_kernel<<<nrows, kThreads, 0, stream>>>(pr.p);
  tile_kernel<<<pr.grid, kThreads, pr.shared, stream>>>(pr.p);
  merge_kernel<<<nrows, kThreads, 0, stream>>>(pr.p);
  return cuda_check(cudaGetLastError(), "attention kernel launch");
}

}  // namespace

Status attention(const AttentionArgs& a) {
  Problem pr;
  TKV_TRY(setup(a, pr));
  TKV_TRY(launch(pr, 0));
  TKV_CUDA_TRY(cudaDeviceSynchronize());
  const size_t nrows = static_cast<size_t>(a.n_q) * a.n_q_heads;
  TKV_TRY(pr.out.download(a.out, sizeof(float) * nrows * a.d));
  if (a.lse) TKV_TRY(pr.lse.download(a.lse, sizeof(float) * nrows));
  return Status::Ok();
}

Expected<double> time_attention(const AttentionArgs& a, const float* k_src, const float* v_src, double min_seconds) {
  Problem pr;
  TKV_TRY(setup(a, pr));
  // A prefill writes the rows it reads: quantize the sources into the rows
  // (token-major, the layout the sources have) before each timed call.
  DeviceBuffer ksrc, vsrc, bad;
  const size_t rows = static_cast<size_t>(a.n_kv) * a.n_kv_heads;
  const bool write = k_src && v_src;
  if (write) {
    if (a.k.blocks || a.v.blocks) return Status::Error("time_attention: writing rows needs a contiguous cache");
    TKV_TRY(ksrc.upload(k_src, sizeof(float) * rows * a.d));
    TKV_TRY(vsrc.upload(v_src, sizeof(float) * rows * a.d));
    const unsigned long long none = ~0ull;
    TKV_TRY(bad.upload(&none, sizeof(none)));
    pr.p.k.ts = a.n_kv_heads * a.k.codec->row_bytes();  // token-major rows
    pr.p.k.hs = a.k.codec->row_bytes();
    pr.p.v.ts = a.n_kv_heads * a.v.codec->row_bytes();
    pr.p.v.hs = a.v.codec->row_bytes();
    if (pr.k.size() < rows * a.k.codec->row_bytes()) TKV_TRY(pr.k.alloc(rows * a.k.codec->row_bytes()));
    if (pr.v.size() < rows * a.v.codec->row_bytes()) TKV_TRY(pr.v.alloc(rows * a.v.codec->row_bytes()));
    pr.p.k.base = pr.k.as<uint8_t>();
    pr.p.v.base = pr.v.as<uint8_t>();
  }
  cudaEvent_t e0, e1;
  TKV_CUDA_TRY(cudaEventCreate(&e0));
  TKV_CUDA_TRY(cudaEventCreate(&e1));
  auto call = [&]() -> Status {
    if (write) {
      TKV_TRY(launch_quantize(pr.kf, ksrc.as<float>(), rows, pr.k.as<uint8_t>(), bad.as<unsigned long long>(), 0));
      TKV_TRY(launch_quantize(pr.vf, vsrc.as<float>(), rows, pr.v.as<uint8_t>(), bad.as<unsigned long long>(), 0));
    }
    return launch(pr, 0);
  };
  Status s = call();  // warm-up
  s = s.ok() ? cuda_check(cudaDeviceSynchronize(), "warm-up") : s;
  std::vector<double> ms;
  double total = 0;
  while (s.ok() && (ms.size() < 3 || (total < min_seconds * 1e3 && ms.size() < 100000))) {
    cudaEventRecord(e0);
    s = call();
    cudaEventRecord(e1);
    if (s.ok()) s = cuda_check(cudaEventSynchronize(e1), "timing");
    float t = 0;
    if (s.ok()) s = cuda_check(cudaEventElapsedTime(&t, e0, e1), "timing");
    ms.push_back(t);
    total += t;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (!s.ok()) return s;
  if (write) {
    unsigned long long b = 0;
    TKV_TRY(bad.download(&b, sizeof(b)));
    if (b != ~0ull) return Status::Error("time_attention: row " + std::to_string(b >> 8) + " could not be quantized");
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace tkv::cuda

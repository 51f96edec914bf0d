// The integer path's error shares per format and d (RESULTS §41): K's prediction (the engine's), whether
// it takes residual bytes, words or narrow bytes, and V's value_share on ±127 (the last columns: the
// shares recomputed from V's tables plus the query bytes' share). Build after the Release build:
//   g++ -O2 -std=c++20 scripts/harness/int8_shares.cpp -o /tmp/int8_shares -I build/layers/tkv_attention -I src \
//       -I build -Lbuild -ltkv_attention -ltkv_codec -ltkv_util -lhwy -lxxhash -fopenmp
#include "attention/score_int8.h"
#include "codec/format.h"
#include "codec/calibrated.h"
#include <cmath>
#include <cstdio>
#include <string>
#include <algorithm>
using namespace tkv;
const double LM[9] = {1.0, 0.3634, 0.1175, 0.03454, 0.009497, 0.002499, 0.000642, 0.0001628, 0.0000410};
int main() {
  for (std::string f : {"tq2", "tq2.5", "tq3", "tq3.5", "tq4", "tq4.5", "tq5", "tq2-nc", "tq3-ip", "tqc2", "tqc3", "tqc4", "tqc5", "tqc6", "tqc8"})
    for (int d : {64, 128, 256}) {
      std::unique_ptr<Codec> c;
      if (f.rfind("tqc", 0) == 0) { auto x = make_calibrated_codec(f, synthetic_head_basis(d, 5)); if (!x.ok()) { printf("%s: %s\n", f.c_str(), x.error().c_str()); continue; } c = std::move(*x); }
      else { auto x = make_codec(f, d, 11); if (!x.ok()) continue; c = std::move(*x); }
      const RowLayout& L = c->layout();
      const float* cs = c->coord_scale();
      attn::Int8Keys k, k127, kv;
      attn::int8_keys_prepare(L, d, d, cs, k);
      attn::int8_keys_prepare(L, d, d, cs, k127, attn::kInt8Residual, false, attn::Int8Side::kValues);
      double codec = 0, smax = 0; int cov = 0;
      std::vector<int> part(d, -1);
      for (int p = 0; p < L.nparts; ++p) for (int i = L.parts[p].begin; i < L.parts[p].begin + L.parts[p].count && i < d; ++i) part[i] = p;
      for (int i = 0; i < d; ++i) { double s = cs ? cs[i] : 1; int p = part[i]; codec += s*s*LM[p >= 0 ? L.parts[p].bits : 0]; if (p < 0) continue; smax = std::max(smax, std::fabs(s)); ++cov; }
      double q = std::pow(3*smax/127, 2)/12*cov/codec;
      attn::Int8Keys kn; attn::int8_keys_prepare(L, d, d, cs, kn, attn::kInt8Residual, true, attn::Int8Side::kKeys);
      printf("%-7s d%-4d K: pred %.4f resid %d wide %d narrow %d | corrected@127 %.4f (centroid %.4f query %.4f)%s\n", f.c_str(), d, k.predicted, k.residual, k.wide, k.narrow, k127.value_share + q, k127.value_share, q,
             k.narrow ? (" corrected@31 " + std::to_string(kn.value_share + q)).c_str() : "");
    }
}

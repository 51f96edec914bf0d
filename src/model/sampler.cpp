#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tkv {

void apply_presence_frequency(float* logits, int n_vocab, const std::vector<int32_t>& tokens, size_t from,
                              float presence_penalty, float frequency_penalty) {
  std::vector<int32_t> count(n_vocab, 0);
  for (size_t i = from; i < tokens.size(); ++i)
    if (tokens[i] >= 0 && tokens[i] < n_vocab) ++count[tokens[i]];
  for (int t = 0; t < n_vocab; ++t)
    if (count[t] > 0) logits[t] -= frequency_penalty * float(count[t]) + presence_penalty;
}

int32_t Sampler::sample(const float* logits, int n_vocab, const std::vector<int32_t>& history,
                        size_t penalty_from) {
  std::vector<float> l(logits, logits + n_vocab);
  if (o_.repeat_penalty != 1.0f) {
    const size_t from = history.size() > size_t(o_.repeat_last_n) ? history.size() - o_.repeat_last_n : 0;
    std::vector<bool> seen(n_vocab, false);
    for (size_t i = from; i < history.size(); ++i)
      if (history[i] >= 0 && history[i] < n_vocab) seen[history[i]] = true;
    for (int i = 0; i < n_vocab; ++i)
      if (seen[i]) l[i] = l[i] > 0 ? l[i] / o_.repeat_penalty : l[i] * o_.repeat_penalty;
  }
  // Skipped entirely when both are 0 so the default path stays bit-identical.
  if (o_.presence_penalty != 0.0f || o_.frequency_penalty != 0.0f)
    apply_presence_frequency(l.data(), n_vocab, history, penalty_from, o_.presence_penalty, o_.frequency_penalty);
  if (o_.temperature <= 0.0f) return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  std::vector<int32_t> idx(n_vocab);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  size_t keep = idx.size();
  if (o_.top_k > 0) keep = std::min<size_t>(keep, o_.top_k);
  std::vector<double> p(keep);
  const double mx = l[idx[0]];
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += (p[i] = std::exp((l[idx[i]] - mx) / o_.temperature));
  for (auto& x : p) x /= sum;
  if (o_.min_p > 0) {  // drop tokens below min_p times the best one
    size_t k = 1;
    while (k < keep && p[k] >= o_.min_p * p[0]) ++k;
    keep = k;
  }
  if (o_.top_p < 1.0f) {  // smallest prefix with mass >= top_p
    double c = 0;
    size_t k = 0;
    while (k < keep) {
      c += p[k++];
      if (c >= o_.top_p) break;
    }
    keep = k;
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i];
  double r = rng_.uniform() * total;
  for (size_t i = 0; i < keep; ++i) {
    r -= p[i];
    if (r <= 0) return idx[i];
  }
  return idx[keep - 1];
}

}  // namespace tkv

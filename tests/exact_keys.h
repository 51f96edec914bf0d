// Tests whose claim is about the exact f32 path (the kernels add no error
// beyond the codes; the fast path equals the reference to 1e-4) run it
// explicitly: the product default scores tq/tqc rows on int8 (KeyScoring),
// whose own error is stated and tested in tests/attention/score_int8_test.cpp.
#pragma once
#include "attention/attention.h"

namespace tkv {

// Sets the process default to kExact for its scope (models, caches and
// every attention call that leaves AttentionArgs::keys at kDefault).
class ExactKeys {
 public:
  ExactKeys() : was_(key_scoring_default()) { set_key_scoring_default(KeyScoring::kExact); }
  ~ExactKeys() { set_key_scoring_default(was_); }
  ExactKeys(const ExactKeys&) = delete;
  ExactKeys& operator=(const ExactKeys&) = delete;

 private:
  KeyScoring was_;
};

}  // namespace tkv

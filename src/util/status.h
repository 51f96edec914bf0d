// util/: what every layer uses — errors as values, f16/bf16, RNG, SIMD
// targets, buffers, files, progress. It includes nothing of turbokv's.
//
// Errors are values: Status for "ok or a message", Expected<T> for "a T or a message".
// Messages name what was wrong (file, field, row, expected value); nothing aborts.
#pragma once
#include <string>
#include <utility>
#include <variant>

namespace tkv {

class Status {
 public:
  Status() = default;
  static Status Ok() { return {}; }
  static Status Error(std::string msg) { Status s; s.ok_ = false; s.msg_ = std::move(msg); return s; }
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const std::string& message() const { return msg_; }
 private:
  bool ok_ = true;
  std::string msg_;
};

template <typename T>
class Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}
  Expected(Status error) : v_(std::move(error)) {}
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& value() const& { return std::get<0>(v_); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  Status status() const { return ok() ? Status::Ok() : std::get<1>(v_); }
  const std::string& error() const { return std::get<1>(v_).message(); }
 private:
  std::variant<T, Status> v_;
};

}  // namespace tkv

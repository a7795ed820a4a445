#pragma once
// Errors as values at the public API: nothing throws across it.
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace tessera {

// What went wrong, in one line a user can act on.
struct ErrorInfo {
  std::string message;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}
  Result(ErrorInfo error) : state_(std::move(error)) {}

  bool ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return ok(); }

  // Precondition: ok().
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }

  // Precondition: !ok().
  const std::string& error() const { return std::get<ErrorInfo>(state_).message; }

 private:
  std::variant<T, ErrorInfo> state_;
};

// A Result with no value.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorInfo error) : error_(std::move(error.message)) {}
  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const std::string& error() const { return *error_; }

 private:
  std::optional<std::string> error_;
};

}  // namespace tessera

// Where memory lives, carried with the pointer (docs/architecture.md "Device views").
// Every array an op of the backend table reads or writes is a DevicePtr or DeviceSpan: the
// caller, which allocated or received the memory, says on which device it is, and the backend
// checks it against its own device, so no backend ever asks the driver what a raw pointer is.
// Host memory is the default device: a std::vector or std::span converts implicitly (it can
// only be host memory); memory of another device is named explicitly (Buffer::ptr, or the
// two-argument constructor).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

namespace moert {

// Where a tensor's bytes live. Host code may dereference only kCpu data.
enum class DeviceKind : uint8_t { kCpu, kCuda };
struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;  // GPU ordinal for kCuda
  bool operator==(const Device&) const = default;
};
// "cpu" or "cuda".
const char* device_kind_name(DeviceKind kind);

// Fails the process (an invariant: the caller handed memory of another device) naming both.
[[noreturn]] void device_mismatch(Device expected, Device actual, const char* what);
inline void check_device(Device expected, Device actual, const char* what) {
  if (!(expected == actual)) [[unlikely]] device_mismatch(expected, actual, what);
}

// A pointer into the memory of one device. Pointer arithmetic keeps the device; a mutable
// pointer converts to a const one (and to void). Null converts from nullptr (on the host).
template <typename T>
class DevicePtr {
 public:
  DevicePtr() = default;
  DevicePtr(std::nullptr_t) {}  // NOLINT: null is null on every device
  DevicePtr(T* data, Device device) : data_(data), device_(device) {}
  // A host vector's elements (as T, const T, void or const void).
  template <typename U>
    requires(std::is_same_v<std::remove_const_t<T>, U> || std::is_void_v<T>)
  DevicePtr(std::vector<U>& host) : data_(host.data()) {}  // NOLINT: host memory by type
  template <typename U>
    requires(std::is_same_v<T, const U> || std::is_same_v<T, const void>)
  DevicePtr(const std::vector<U>& host) : data_(host.data()) {}  // NOLINT
  template <typename U>
    requires(!std::is_same_v<U, T> && std::is_convertible_v<U*, T*>)
  DevicePtr(const DevicePtr<U>& other) : data_(other.get()), device_(other.device()) {}  // NOLINT

  T* get() const { return data_; }
  Device device() const { return device_; }
  bool on_host() const { return device_.kind == DeviceKind::kCpu; }
  // The pointer, for code that dereferences it on `expected` (checked; null passes: it
  // points into no device's memory).
  T* on(Device expected, const char* what) const {
    if (data_ != nullptr) check_device(expected, device_, what);
    return data_;
  }
  // The pointer, for host code (checked to be host memory).
  T* host(const char* what = "an array") const { return on(Device{}, what); }

  explicit operator bool() const { return data_ != nullptr; }
  friend bool operator==(const DevicePtr& p, std::nullptr_t) { return p.data_ == nullptr; }
  DevicePtr operator+(int64_t n) const { return {data_ + n, device_}; }
  DevicePtr& operator+=(int64_t n) {
    data_ += n;
    return *this;
  }

 private:
  T* data_ = nullptr;
  Device device_;
};

// Host memory named as such.
template <typename T>
DevicePtr<T> host_ptr(T* data) {
  return {data, Device{}};
}

// `size` elements of one device's memory.
template <typename T>
class DeviceSpan {
 public:
  DeviceSpan() = default;
  DeviceSpan(DevicePtr<T> data, size_t size) : data_(data), size_(size) {}
  template <typename U>
    requires std::is_convertible_v<U (*)[], T (*)[]>
  DeviceSpan(std::span<U> host) : data_(host_ptr<T>(host.data())), size_(host.size()) {}  // NOLINT
  template <typename U>
    requires std::is_convertible_v<U (*)[], T (*)[]>
  DeviceSpan(std::vector<U>& host) : DeviceSpan(std::span<U>(host)) {}  // NOLINT
  template <typename U>
    requires std::is_convertible_v<const U (*)[], T (*)[]>
  DeviceSpan(const std::vector<U>& host) : DeviceSpan(std::span<const U>(host)) {}  // NOLINT
  template <typename U>
    requires(!std::is_same_v<U, T> && std::is_convertible_v<U (*)[], T (*)[]>)
  DeviceSpan(const DeviceSpan<U>& other) : data_(other.data()), size_(other.size()) {}  // NOLINT

  DevicePtr<T> data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Device device() const { return data_.device(); }
  DeviceSpan subspan(size_t offset, size_t count) const { return {data_ + static_cast<int64_t>(offset), count}; }
  // The elements, for code that reads them on `expected` (checked).
  std::span<T> on(Device expected, const char* what) const { return {data_.on(expected, what), size_}; }
  std::span<T> host(const char* what = "an array") const { return on(Device{}, what); }

 private:
  DevicePtr<T> data_;
  size_t size_ = 0;
};

}  // namespace moert

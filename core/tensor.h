// Non-owning tensor views: dtype, shape, strides (in elements), and the device holding the
// data (host memory unless a backend allocated it elsewhere). A view never frees its data;
// its owner (an mmapped file, a Buffer, a backend allocation) must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace moert {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_to_string(const Shape& shape);  // "[4, 256]"
// Row-major strides for `shape`, in elements.
Shape contiguous_strides(const Shape& shape);

struct TensorView {
  DType dtype = DType::kF32;
  Shape shape;
  Shape strides;  // in elements; contiguous_strides(shape) for every tensor read from a file
  void* data = nullptr;
  Device device;

  static TensorView contiguous(DType dtype, Shape shape, void* data);

  int64_t ndim() const { return static_cast<int64_t>(shape.size()); }
  int64_t dim(int64_t i) const { return shape.at(static_cast<size_t>(i)); }
  int64_t numel() const { return shape_numel(shape); }
  bool is_contiguous() const { return strides == contiguous_strides(shape); }
  // Typed pointer; the caller has checked the dtype.
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  // View of row `index` of the first dimension (rank drops by one).
  TensorView row(int64_t index) const;
};

// Owning, contiguous storage with a view over it: 64-byte aligned host memory (from 4 MiB up,
// 2 MiB aligned and advised to use transparent huge pages), or memory a backend allocated on
// its device and hands over with the function that releases it.
class Buffer {
 public:
  using Release = void (*)(void* data);
  Buffer() = default;
  // Takes ownership of `view.data` (size_bytes long); `release(view.data)` frees it.
  Buffer(TensorView view, uint64_t size_bytes, Release release);
  // Zero-filled storage.
  Buffer(DType dtype, Shape shape);
  // Storage left uninitialised (no page is touched until written: a large KV pool costs
  // nothing up front).
  static Buffer uninitialized(DType dtype, Shape shape);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  const TensorView& view() const { return view_; }
  template <typename T>
  T* data() const { return view_.as<T>(); }
  // The storage as a pointer / span of T on its device (what the backend ops take).
  template <typename T>
  DevicePtr<T> ptr() const { return {view_.as<T>(), view_.device}; }
  template <typename T>
  DeviceSpan<T> span() const { return {ptr<T>(), static_cast<size_t>(size_bytes_ / sizeof(T))}; }
  uint64_t size_bytes() const { return size_bytes_; }

 private:
  Buffer(DType dtype, Shape shape, bool zero_fill);

  TensorView view_;
  uint64_t size_bytes_ = 0;
  Release release_ = nullptr;  // null: std::free
};

}  // namespace moert

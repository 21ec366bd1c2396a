#include "core/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/check.h"

namespace moert {

namespace {
constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;
constexpr uint64_t kHugeBufferBytes = 2 * kHugePageBytes;
}  // namespace

int64_t shape_numel(const Shape& shape) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  return numel;
}

std::string shape_to_string(const Shape& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

TensorView TensorView::contiguous(DType dtype, Shape shape, void* data) {
  TensorView view;
  view.dtype = dtype;
  view.strides = contiguous_strides(shape);
  view.shape = std::move(shape);
  view.data = data;
  return view;
}

TensorView TensorView::row(int64_t index) const {
  MOERT_CHECK(ndim() >= 1 && index >= 0 && index < shape[0],
              "row " << index << " of a tensor of shape " << shape_to_string(shape));
  MOERT_CHECK(dtype_bits(dtype) % 8 == 0, "row() of a sub-byte dtype");
  TensorView out;
  out.dtype = dtype;
  out.shape.assign(shape.begin() + 1, shape.end());
  out.strides.assign(strides.begin() + 1, strides.end());
  out.data = static_cast<char*>(data) + index * strides[0] * (dtype_bits(dtype) / 8);
  return out;
}

Buffer::Buffer(DType dtype, Shape shape) : Buffer(dtype, std::move(shape), true) {}

Buffer Buffer::uninitialized(DType dtype, Shape shape) { return Buffer(dtype, std::move(shape), false); }

Buffer::Buffer(DType dtype, Shape shape, bool zero_fill) {
  const auto bytes = dtype_storage_bytes(dtype, static_cast<uint64_t>(shape_numel(shape)));
  MOERT_CHECK(bytes.has_value(), "buffer of shape " << shape_to_string(shape) << " is not whole bytes");
  size_bytes_ = *bytes;
  // Large buffers (weights repacked at load, KV pools) start on a huge-page boundary and ask
  // for transparent huge pages: one page fault per 2 MiB instead of per 4 KiB when first
  // written (a fault costs microseconds in a VM; docs/perf/cpu-roofline.md).
  const bool huge = size_bytes_ >= kHugeBufferBytes;
  const uint64_t align = huge ? kHugePageBytes : 64;
  const uint64_t rounded = (size_bytes_ + align - 1) / align * align;
  void* data = rounded == 0 ? nullptr : std::aligned_alloc(align, rounded);
#if defined(MADV_HUGEPAGE)
  if (huge && data != nullptr) ::madvise(data, rounded, MADV_HUGEPAGE);  // advice only: THP may be off
#endif
  MOERT_CHECK(rounded == 0 || data != nullptr, "out of host memory allocating " << rounded << " bytes");
  if (data != nullptr && zero_fill) std::memset(data, 0, rounded);
  view_ = TensorView::contiguous(dtype, std::move(shape), data);
}

Buffer::Buffer(TensorView view, uint64_t size_bytes, Release release)
    : view_(std::move(view)), size_bytes_(size_bytes), release_(release) {}

Buffer::~Buffer() {
  if (view_.data == nullptr) return;
  if (release_ != nullptr) {
    release_(view_.data);
  } else {
    std::free(view_.data);
  }
}

Buffer::Buffer(Buffer&& other) noexcept
    : view_(std::exchange(other.view_, TensorView{})),
      size_bytes_(std::exchange(other.size_bytes_, 0)),
      release_(std::exchange(other.release_, nullptr)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Buffer old(std::move(*this));
    view_ = std::exchange(other.view_, TensorView{});
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    release_ = std::exchange(other.release_, nullptr);
  }
  return *this;
}

}  // namespace moert

namespace moert {

const char* device_kind_name(DeviceKind kind) { return kind == DeviceKind::kCpu ? "cpu" : "cuda"; }

void device_mismatch(Device expected, Device actual, const char* what) {
  check_failed(__FILE__, __LINE__, "device == expected",
               std::string(what) + " is memory of " + device_kind_name(actual.kind) + ":" +
                   std::to_string(actual.index) + ", expected " + device_kind_name(expected.kind) + ":" +
                   std::to_string(expected.index));
}

}  // namespace moert

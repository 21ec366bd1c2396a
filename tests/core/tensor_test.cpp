#include "core/tensor.h"

#include <gtest/gtest.h>

#include "tests/support/death_test.h"

namespace moert {
namespace {

TEST(Tensor, ContiguousStridesAndRows) {
  Buffer buffer(DType::kF32, {2, 3, 4});
  const TensorView& view = buffer.view();
  EXPECT_EQ(view.strides, (Shape{12, 4, 1}));
  EXPECT_EQ(view.numel(), 24);
  EXPECT_TRUE(view.is_contiguous());
  for (int i = 0; i < 24; ++i) buffer.data<float>()[i] = static_cast<float>(i);
  const TensorView second = view.row(1);
  EXPECT_EQ(second.shape, (Shape{3, 4}));
  EXPECT_EQ(second.as<float>()[0], 12.0f);
  EXPECT_EQ(second.row(2).as<float>()[3], 23.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(view.data) % 64, 0u);
}

TEST(Tensor, ShapeText) {
  EXPECT_EQ(shape_to_string({}), "[]");
  EXPECT_EQ(shape_to_string({8, 256}), "[8, 256]");
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({3, 0}), 0);
}

// From 4 MiB up a buffer starts on a 2 MiB boundary (huge pages); below, on 64 bytes. Both
// zero-filled to their last byte.
TEST(Tensor, LargeBuffersAlignToHugePages) {
  const Buffer large(DType::kU8, {(int64_t{4} << 20) + 3});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(large.view().data) % (uintptr_t{2} << 20), 0u);
  EXPECT_EQ(large.size_bytes(), (uint64_t{4} << 20) + 3);
  EXPECT_EQ(large.data<uint8_t>()[large.size_bytes() - 1], 0);
  const Buffer small(DType::kU8, {(int64_t{4} << 20) - 1});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.view().data) % 64, 0u);
  EXPECT_EQ(small.data<uint8_t>()[small.size_bytes() - 1], 0);
}

TEST(Tensor, BufferMoves) {
  Buffer a(DType::kBF16, {5});
  void* data = a.view().data;
  Buffer b = std::move(a);
  EXPECT_EQ(b.view().data, data);
  EXPECT_EQ(b.size_bytes(), 10u);
  EXPECT_EQ(a.view().data, nullptr);
}

// A device view keeps its device through arithmetic and const conversion; host memory by
// type (vectors) and by name (host_ptr) is the CPU's; a Buffer names the device it was
// allocated on (core/device.h).
TEST(DeviceViews, CarryTheirDeviceAndCheckIt) {
  std::vector<float> host(8, 1.0f);
  const DevicePtr<float> from_vector = host;
  EXPECT_EQ(from_vector.get(), host.data());
  EXPECT_TRUE(from_vector.on_host());
  EXPECT_EQ(host_ptr(host.data() + 3).get(), from_vector.get() + 3);
  const Device gpu{DeviceKind::kCuda, 1};
  float cell = 0.0f;
  const DevicePtr<float> elsewhere(&cell, gpu);
  const DevicePtr<const void> moved = elsewhere + 2;  // arithmetic, then to const void
  EXPECT_EQ(moved.device(), gpu);
  EXPECT_EQ(moved.get(), static_cast<const void*>(&cell + 2));
  EXPECT_FALSE(moved.on_host());
  EXPECT_EQ(elsewhere.on(gpu, "x"), &cell);
  const DevicePtr<float> null = nullptr;
  EXPECT_TRUE(null == nullptr);
  EXPECT_FALSE(static_cast<bool>(null));

  Buffer buffer(DType::kF32, {2, 3});
  EXPECT_TRUE(buffer.ptr<float>().on_host());
  EXPECT_EQ(buffer.span<float>().size(), 6u);
  const DeviceSpan<const float> rows = buffer.span<float>().subspan(3, 3);
  EXPECT_EQ(rows.data().get(), buffer.data<float>() + 3);
  EXPECT_EQ(rows.host().size(), 3u);
  const DeviceSpan<const float> of_vector = host;
  EXPECT_EQ(of_vector.size(), 8u);
}

TEST(DeviceViews, HostCodeRefusesAnotherDevicesMemoryNamingBoth) {
  float cell = 0.0f;
  const DevicePtr<float> on_gpu(&cell, Device{DeviceKind::kCuda, 0});
  MOERT_EXPECT_DEATH((void)on_gpu.host("rms_norm x"), "rms_norm x is memory of cuda:0, expected cpu:0");
  MOERT_EXPECT_DEATH((void)host_ptr(&cell).on(Device{DeviceKind::kCuda, 1}, "copy_bytes src"),
                     "copy_bytes src is memory of cpu:0, expected cuda:1");
}

}  // namespace
}  // namespace moert

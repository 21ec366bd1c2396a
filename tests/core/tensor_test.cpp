#include "core/tensor.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace moert

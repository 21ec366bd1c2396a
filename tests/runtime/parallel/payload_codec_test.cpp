// The expert-parallel payload codec against a float64 reference of each rounding rule, on
// rows with signs, ragged FP8 blocks, zero blocks, magnitudes far apart and non-finite values.
#include "runtime/parallel/payload_codec.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "quant/formats/minifloat.h"

namespace moert::parallel {
namespace {

// Rows whose blocks differ in scale by orders of magnitude (a per-row scale would lose the
// small blocks; a per-128 one must not).
std::vector<float> test_rows(int64_t num_rows, int64_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> rows(static_cast<size_t>(num_rows * dim));
  for (int64_t r = 0; r < num_rows; ++r) {
    for (int64_t i = 0; i < dim; ++i) {
      const float magnitude = std::pow(10.0f, static_cast<float>((i / kFp8PayloadBlock + r) % 5) - 2.0f);
      rows[static_cast<size_t>(r * dim + i)] = normal(rng) * magnitude;
    }
  }
  return rows;
}

std::vector<float> round_trip(PayloadDType dtype, const std::vector<float>& rows, int64_t dim) {
  const int64_t num_rows = static_cast<int64_t>(rows.size()) / dim;
  std::vector<std::byte> wire(static_cast<size_t>(num_rows * payload_row_bytes(dtype, dim)));
  encode_payload_rows(dtype, rows.data(), num_rows, dim, wire.data());
  std::vector<float> back(rows.size());
  decode_payload_rows(dtype, wire.data(), num_rows, dim, back.data());
  return back;
}

TEST(PayloadCodec, RowBytesAreWhatTheWireCarries) {
  EXPECT_EQ(payload_row_bytes(PayloadDType::kF32, 2048), 8192);
  EXPECT_EQ(payload_row_bytes(PayloadDType::kBf16, 2048), 4096);
  EXPECT_EQ(payload_row_bytes(PayloadDType::kFp8, 2048), 2048 + 16 * 4);  // <= 0.3x of f32
  EXPECT_EQ(payload_row_bytes(PayloadDType::kFp8, 300), 300 + 3 * 4);     // ragged last block
  EXPECT_LE(payload_row_bytes(PayloadDType::kFp8, 7168), 0.3 * payload_row_bytes(PayloadDType::kF32, 7168));
}

TEST(PayloadCodec, F32IsExact) {
  const std::vector<float> rows = test_rows(3, 300, 1);
  const std::vector<float> back = round_trip(PayloadDType::kF32, rows, 300);
  EXPECT_EQ(std::memcmp(rows.data(), back.data(), rows.size() * sizeof(float)), 0);
}

// BF16 keeps 8 significant bits with round to nearest, ties to even: relative error <= 2^-8,
// and the result is the representable neighbour nearest in float64.
TEST(PayloadCodec, Bf16RoundsEachValueToItsNearestBf16) {
  const int64_t dim = 300;
  const std::vector<float> rows = test_rows(4, dim, 2);
  const std::vector<float> back = round_trip(PayloadDType::kBf16, rows, dim);
  for (size_t i = 0; i < rows.size(); ++i) {
    const double x = rows[i];
    ASSERT_NE(x, 0.0);
    EXPECT_LE(std::fabs(back[i] - x) / std::fabs(x), std::ldexp(1.0, -8)) << i;
    uint32_t bits;
    std::memcpy(&bits, &back[i], sizeof(bits));
    EXPECT_EQ(bits & 0xffffu, 0u) << "not a bf16 value at " << i;
    // No bf16 neighbour is nearer (float64 distances).
    for (const int step : {-1, 1}) {
      const uint32_t neighbour_bits = bits + static_cast<uint32_t>(step * 0x10000);
      float neighbour;
      std::memcpy(&neighbour, &neighbour_bits, sizeof(neighbour));
      EXPECT_LE(std::fabs(back[i] - x), std::fabs(static_cast<double>(neighbour) - x)) << i;
    }
  }
  // Ties go to the even significand.
  const float tie = 1.0f + std::ldexp(1.0f, -8);  // halfway between 1 and 1 + 2^-7
  EXPECT_EQ(round_trip(PayloadDType::kBf16, {tie}, 1)[0], 1.0f);
}

// FP8: per block of 128 values, scale = amax / 448, the block's largest magnitude kept exactly
// and every value within half an E4M3 step of its float64 value (relative 2^-4 for normals,
// absolute 2^-10 x scale below the normal range).
TEST(PayloadCodec, Fp8ScalesEachBlockOf128ByItsOwnAmax) {
  const int64_t dim = 300;  // blocks of 128, 128, 44
  const std::vector<float> rows = test_rows(5, dim, 3);
  const std::vector<float> back = round_trip(PayloadDType::kFp8, rows, dim);
  for (int64_t r = 0; r < 5; ++r) {
    for (int64_t start = 0; start < dim; start += kFp8PayloadBlock) {
      const int64_t end = std::min(dim, start + kFp8PayloadBlock);
      double amax = 0.0;
      for (int64_t i = start; i < end; ++i) amax = std::max(amax, std::fabs(static_cast<double>(rows[static_cast<size_t>(r * dim + i)])));
      const double scale = static_cast<float>(amax / 448.0);
      for (int64_t i = start; i < end; ++i) {
        const size_t at = static_cast<size_t>(r * dim + i);
        const double x = rows[at];
        const double error = std::fabs(back[at] - x);
        const double bound = std::max(std::fabs(x) * std::ldexp(1.0, -4), scale * std::ldexp(1.0, -10)) * 1.0001;
        EXPECT_LE(error, bound) << "row " << r << " value " << i;
        if (std::fabs(x) == amax) {
          EXPECT_NEAR(back[at], x, amax * 1e-6) << "the amax must survive";
        }
      }
    }
  }
}

// The fast per-value step equals the format's reference encoder on every 61st float of
// [0, 448] and the values just past it, both signs (18M values, subnormals to saturation).
TEST(PayloadCodec, FastE4m3EncodeEqualsTheReferenceEncoder) {
  uint32_t limit;
  const float past = 470.0f;
  std::memcpy(&limit, &past, sizeof(limit));
  int64_t checked = 0;
  for (uint32_t bits = 0; bits <= limit; bits += 61) {
    for (const uint32_t sign : {0u, 0x80000000u}) {
      const uint32_t signed_bits = bits | sign;
      float v;
      std::memcpy(&v, &signed_bits, sizeof(v));
      ASSERT_EQ(e4m3_encode_in_range(v), quant::e4m3_encode(v)) << v;
      ++checked;
    }
  }
  for (const float v : {0.0f, -0.0f, 448.0f, -448.0f, 0x1p-6f, 0x1p-9f, 0x1.8p-10f, 0x1p-10f, 0x1.fp-7f, 240.0f, 232.0f}) {
    EXPECT_EQ(e4m3_encode_in_range(v), quant::e4m3_encode(v)) << v;
  }
  EXPECT_GT(checked, 10000000);
}

TEST(PayloadCodec, Fp8ZeroBlocksAndNonFiniteBlocks) {
  std::vector<float> rows(256, 0.0f);
  rows[130] = std::numeric_limits<float>::infinity();
  rows[131] = 2.0f;
  const std::vector<float> back = round_trip(PayloadDType::kFp8, rows, 256);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(back[static_cast<size_t>(i)], 0.0f) << "zero block, value " << i;
  for (int i = 128; i < 256; ++i) EXPECT_TRUE(std::isnan(back[static_cast<size_t>(i)])) << "non-finite block, value " << i;
}

TEST(PayloadCodec, ParsingNamesTheOptionAndTheValues) {
  EXPECT_EQ(parse_payload_dtype("bf16", false, "--ep-combine-dtype").value(), PayloadDType::kBf16);
  EXPECT_EQ(parse_payload_dtype("fp8", true, "--ep-dispatch-dtype").value(), PayloadDType::kFp8);
  const Status refused = parse_payload_dtype("fp8", false, "--ep-combine-dtype").status();
  EXPECT_EQ(refused.message(), "--ep-combine-dtype 'fp8' is not one of f32, bf16");
  EXPECT_FALSE(parse_payload_dtype("BF16", true, "--ep-dispatch-dtype").is_ok());
}

}  // namespace
}  // namespace moert::parallel

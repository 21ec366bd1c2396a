#include "core/status.h"

#include <gtest/gtest.h>

#include "tests/support/death_test.h"

#include "core/dtype.h"
#include "core/check.h"
#include "core/log.h"

namespace moert {
namespace {

Result<int> half_of(int value) {
  if (value % 2 != 0) return invalid_argument("value = " + std::to_string(value) + " must be even");
  return value / 2;
}

Result<int> quarter_of(int value) {
  MOERT_ASSIGN_OR_RETURN(int half, half_of(value));
  MOERT_ASSIGN_OR_RETURN(int quarter, half_of(half));
  return quarter;
}

TEST(Status, OkAndErrorCarryCodeAndMessage) {
  EXPECT_TRUE(Status::ok().is_ok());
  EXPECT_EQ(Status::ok().to_string(), "ok");
  const Status error = corrupt("header size 9 exceeds file");
  EXPECT_FALSE(error.is_ok());
  EXPECT_EQ(error.code(), StatusCode::kCorrupt);
  EXPECT_EQ(error.to_string(), "corrupt: header size 9 exceeds file");
  EXPECT_EQ(error.with_context("model.safetensors").message(), "model.safetensors: header size 9 exceeds file");
}

TEST(Result, AssignOrReturnPropagatesTheFirstError) {
  EXPECT_EQ(quarter_of(12).value(), 3);
  const Result<int> odd_half = quarter_of(6);
  ASSERT_FALSE(odd_half.is_ok());
  EXPECT_EQ(odd_half.status().message(), "value = 3 must be even");
  EXPECT_EQ(quarter_of(5).status().code(), StatusCode::kInvalidArgument);
}

TEST(DType, NamesBitsAndStorage) {
  EXPECT_EQ(dtype_from_name("BF16"), DType::kBF16);
  EXPECT_EQ(dtype_from_name("F8_E4M3"), DType::kF8E4M3);
  EXPECT_FALSE(dtype_from_name("F12").has_value());
  EXPECT_EQ(dtype_name(DType::kI64), "I64");
  EXPECT_EQ(dtype_bits(DType::kF4), 4);
  EXPECT_EQ(dtype_storage_bytes(DType::kF4, 6), 3u);
  EXPECT_FALSE(dtype_storage_bytes(DType::kF4, 3).has_value());
  EXPECT_FALSE(dtype_storage_bytes(DType::kF6E2M3, 3).has_value());
  EXPECT_EQ(dtype_storage_bytes(DType::kF6E2M3, 4), 3u);
  EXPECT_EQ(dtype_storage_bytes(DType::kF32, 10), 40u);
  EXPECT_FALSE(dtype_storage_bytes(DType::kF64, UINT64_MAX / 4).has_value());
}

TEST(Log, LevelsParse) {
  LogLevel level = LogLevel::kInfo;
  EXPECT_TRUE(parse_log_level("debug", &level));
  EXPECT_EQ(level, LogLevel::kDebug);
  EXPECT_FALSE(parse_log_level("loud", &level));
  EXPECT_EQ(level, LogLevel::kDebug);
}

TEST(CheckDeathTest, ReportsFileLineAndRank) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  MOERT_EXPECT_DEATH(
      {
        ProcessIdentity who;
        who.rank = 3;
        who.host = "nodeA";
        set_process_identity(who);
        MOERT_CHECK(1 + 1 == 3, "arithmetic = " << 2);
      },
      "r3@nodeA.*CHECK failed at .*status_test.cpp:[0-9]+: 1 \\+ 1 == 3: arithmetic = 2");
}

}  // namespace
}  // namespace moert

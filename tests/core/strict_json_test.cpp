// Strict JSON: nesting past the limit and duplicate keys are errors naming the subject;
// integers are range-checked before narrowing; files must be regular and bounded.
#include "core/strict_json.h"

#include <gtest/gtest.h>

#include <fstream>

namespace moert {
namespace {

TEST(StrictJson, DepthDuplicatesAndValidity) {
  EXPECT_TRUE(parse_strict_json(R"({"a": [1, {"b": 2}], "c": {"a": 1}})", "x").is_ok());  // same key, other objects
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const Status too_deep = parse_strict_json(deep, "the request").status();
  EXPECT_EQ(too_deep.message(), "the request is nested deeper than 64 levels");
  EXPECT_TRUE(parse_strict_json(std::string(64, '[') + std::string(64, ']'), "x").is_ok());  // 64 levels
  EXPECT_FALSE(parse_strict_json(std::string(65, '[') + std::string(65, ']'), "x").is_ok());
  const std::string deep_objects = [] {
    std::string text;
    for (int i = 0; i < 5000; ++i) text += "{\"k\":";
    text += "1";
    for (int i = 0; i < 5000; ++i) text += "}";
    return text;
  }();
  EXPECT_FALSE(parse_strict_json(deep_objects, "x").is_ok());
  EXPECT_EQ(parse_strict_json(R"({"a": 1, "b": {"c": 1, "c": 2}})", "config.json").status().message(),
            "config.json has duplicate key 'c'");
  EXPECT_EQ(parse_strict_json("{nope", "header").status().message().rfind("header is not valid JSON (", 0), 0u);
  EXPECT_FALSE(parse_strict_json("", "x").is_ok());
}

TEST(StrictJson, IntegersAreRangeCheckedBeforeNarrowing) {
  const nlohmann::json j = nlohmann::json::parse(R"([4294967300, -1, 7, 1.5, "3", 18446744073709551615])");
  EXPECT_EQ(json_integer_in_range(j[0], "'n_routed_experts'", 0, INT32_MAX).status().message(),
            "'n_routed_experts' = 4294967300 is outside [0, 2147483647]");
  EXPECT_FALSE(json_integer_in_range(j[1], "x", 0, 10).is_ok());
  EXPECT_EQ(json_integer_in_range(j[2], "x", 0, 10).value(), 7);
  EXPECT_NE(json_integer_in_range(j[3], "x", 0, 10).status().message().find("must be an integer"), std::string::npos);
  EXPECT_FALSE(json_integer_in_range(j[4], "x", 0, 10).is_ok());
  EXPECT_FALSE(json_integer_in_range(j[5], "x", INT64_MIN, INT64_MAX).is_ok());
}

TEST(StrictJson, FilesMustBeRegularAndBounded) {
  EXPECT_EQ(read_strict_json_file("/nonexistent/x.json", 1 << 20).status().code(), StatusCode::kNotFound);
  EXPECT_NE(read_strict_json_file("/tmp", 1 << 20).status().message().find("is not a regular file"), std::string::npos);
  EXPECT_NE(read_strict_json_file("/dev/zero", 1 << 20).status().message().find("is not a regular file"), std::string::npos);
  const std::string path = ::testing::TempDir() + "strict_json_test.json";
  std::ofstream(path) << R"({"a": 1})";
  EXPECT_EQ(read_strict_json_file(path, 1 << 20).value().at("a"), 1);
  EXPECT_NE(read_strict_json_file(path, 3).status().message().find("more than the 3"), std::string::npos);
}

}  // namespace
}  // namespace moert

// The coordinator's wire form of finished requests carries every field exactly, and bytes
// that end early or claim impossible counts are refused by name.
#include "runtime/parallel/request_output_codec.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace moert::parallel {
namespace {

engine::RequestOutput full_output() {
  engine::RequestOutput o;
  o.id = "r\n1";
  o.id_json = "\"r\\n1\"";
  engine::SampleOutput a;
  a.token_ids = {5, -1, 2147483647};
  a.finish_reason = "stop";
  a.text = std::string("h\0i", 3);  // bytes, not C strings
  a.stop_string = "\n\n";
  a.logprobs = {{5, -0.1, {{5, -0.1}, {9, -2.5}}}, {7, -std::numeric_limits<double>::infinity(), {}}};
  engine::SampleOutput b;  // no optional fields at all
  b.finish_reason = "length";
  b.stop_token = 0;
  o.outputs = {a, b};
  o.prompt_tokens = 3;
  o.output_tokens = 4;
  o.cached_prompt_tokens = 16;
  o.num_preemptions = 2;
  o.time_s = 0.1 + 0.2;  // not a short decimal: bits must survive
  o.queue_s = 1e-300;
  o.ttft_s = 0.125;
  o.e2e_s = 3.0;
  o.token_times_s = {0.125, 0.25, 1.0 / 3.0};
  return o;
}

void expect_same(const engine::RequestOutput& x, const engine::RequestOutput& y) {
  EXPECT_EQ(x.id, y.id);
  EXPECT_EQ(x.id_json, y.id_json);
  ASSERT_EQ(x.outputs.size(), y.outputs.size());
  for (size_t i = 0; i < x.outputs.size(); ++i) {
    const engine::SampleOutput &s = x.outputs[i], &t = y.outputs[i];
    EXPECT_EQ(s.token_ids, t.token_ids);
    EXPECT_EQ(s.finish_reason, t.finish_reason);
    EXPECT_EQ(s.text, t.text);
    EXPECT_EQ(s.stop_string, t.stop_string);
    EXPECT_EQ(s.stop_token, t.stop_token);
    ASSERT_EQ(s.logprobs.size(), t.logprobs.size());
    for (size_t j = 0; j < s.logprobs.size(); ++j) {
      EXPECT_EQ(s.logprobs[j].token, t.logprobs[j].token);
      EXPECT_EQ(s.logprobs[j].logprob, t.logprobs[j].logprob);
      EXPECT_EQ(s.logprobs[j].top, t.logprobs[j].top);
    }
  }
  EXPECT_EQ(x.prompt_tokens, y.prompt_tokens);
  EXPECT_EQ(x.output_tokens, y.output_tokens);
  EXPECT_EQ(x.cached_prompt_tokens, y.cached_prompt_tokens);
  EXPECT_EQ(x.num_preemptions, y.num_preemptions);
  EXPECT_EQ(x.time_s, y.time_s);
  EXPECT_EQ(x.queue_s, y.queue_s);
  EXPECT_EQ(x.ttft_s, y.ttft_s);
  EXPECT_EQ(x.e2e_s, y.e2e_s);
  EXPECT_EQ(x.token_times_s, y.token_times_s);
}

TEST(RequestOutputCodec, RoundTripsEveryFieldAfterAPrefix) {
  std::vector<uint8_t> bytes = {1, 2, 3};  // what the coordinator puts first (a step record)
  const engine::RequestOutput full = full_output();
  engine::RequestOutput empty;
  encode_request_outputs({full, empty}, bytes);
  size_t offset = 3;
  Result<std::vector<engine::RequestOutput>> decoded = decode_request_outputs(bytes.data(), bytes.size(), &offset);
  ASSERT_TRUE(decoded.is_ok()) << decoded.status().to_string();
  EXPECT_EQ(offset, bytes.size());
  ASSERT_EQ(decoded->size(), 2u);
  expect_same((*decoded)[0], full);
  expect_same((*decoded)[1], empty);

  std::vector<uint8_t> none;
  encode_request_outputs({}, none);
  offset = 0;
  EXPECT_TRUE(decode_request_outputs(none.data(), none.size(), &offset)->empty());
}

TEST(RequestOutputCodec, RefusesTruncatedAndImpossibleBytes) {
  std::vector<uint8_t> bytes;
  encode_request_outputs({full_output()}, bytes);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    size_t offset = 0;
    const Status status = decode_request_outputs(bytes.data(), cut, &offset).status();
    ASSERT_FALSE(status.is_ok()) << "cut at " << cut;
    EXPECT_NE(status.message().find("request outputs"), std::string::npos) << status.to_string();
    EXPECT_EQ(offset, 0u);
  }
  std::vector<uint8_t> huge(8, 0xff);  // 2^64 - 1 requests in 8 bytes
  size_t offset = 0;
  const Status status = decode_request_outputs(huge.data(), huge.size(), &offset).status();
  EXPECT_NE(status.message().find("requests count 18446744073709551615 exceeds the bytes left"), std::string::npos)
      << status.to_string();
}

}  // namespace
}  // namespace moert::parallel

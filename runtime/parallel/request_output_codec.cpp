#include "runtime/parallel/request_output_codec.h"

#include <cstring>
#include <string>
#include <type_traits>

namespace moert::parallel {
namespace {

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
  template <typename T>
  void scalar(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* begin = reinterpret_cast<const uint8_t*>(&value);
    out_.insert(out_.end(), begin, begin + sizeof(T));
  }
  void string(const std::string& s) {
    scalar<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  template <typename T>
  void optional(const std::optional<T>& value) {
    scalar<uint8_t>(value.has_value() ? 1 : 0);
    if (!value.has_value()) return;
    if constexpr (std::is_same_v<T, std::string>) {
      string(*value);
    } else {
      scalar(*value);
    }
  }
  template <typename T>
  void scalars(const std::vector<T>& values) {
    scalar<uint64_t>(values.size());
    for (const T& v : values) scalar(v);
  }

 private:
  std::vector<uint8_t>& out_;
};

// Reads fields in the order Writer wrote them; the first short read latches an error naming
// the field, and every later read is a no-op.
class Reader {
 public:
  Reader(const uint8_t* bytes, size_t size, size_t offset) : bytes_(bytes), size_(size), offset_(offset) {}
  template <typename T>
  T scalar(const char* what) {
    T value{};
    if (!take(sizeof(T), what)) return value;
    std::memcpy(&value, bytes_ + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }
  // A count of items of at least `min_item_bytes` each: no more than the bytes left can hold.
  size_t count(const char* what, size_t min_item_bytes) {
    const auto n = scalar<uint64_t>(what);
    if (!error_.empty()) return 0;
    if (min_item_bytes > 0 && n > (size_ - offset_) / min_item_bytes) {
      error_ = std::string("request outputs: ") + what + " count " + std::to_string(n) + " exceeds the bytes left";
      return 0;
    }
    return static_cast<size_t>(n);
  }
  std::string string(const char* what) {
    const size_t n = count(what, 1);
    if (!take(n, what)) return {};
    std::string s(reinterpret_cast<const char*>(bytes_ + offset_), n);
    offset_ += n;
    return s;
  }
  template <typename T>
  std::optional<T> optional(const char* what) {
    if (scalar<uint8_t>(what) == 0) return std::nullopt;
    if constexpr (std::is_same_v<T, std::string>) {
      return string(what);
    } else {
      return scalar<T>(what);
    }
  }
  template <typename T>
  std::vector<T> scalars(const char* what) {
    std::vector<T> values(count(what, sizeof(T)));
    for (T& v : values) v = scalar<T>(what);
    return values;
  }
  const std::string& error() const { return error_; }
  size_t offset() const { return offset_; }

 private:
  bool take(size_t bytes, const char* what) {
    if (!error_.empty()) return false;
    if (size_ - offset_ < bytes) {
      error_ = std::string("request outputs: the bytes end inside ") + what;
      return false;
    }
    return true;
  }
  const uint8_t* bytes_;
  size_t size_;
  size_t offset_;
  std::string error_;
};

void encode_sample(const engine::SampleOutput& sample, Writer& w) {
  w.scalars(sample.token_ids);
  w.string(sample.finish_reason);
  w.optional(sample.text);
  w.optional(sample.stop_string);
  w.optional(sample.stop_token);
  w.scalar<uint64_t>(sample.logprobs.size());
  for (const sampling::TokenLogprob& entry : sample.logprobs) {
    w.scalar(entry.token);
    w.scalar(entry.logprob);
    w.scalar<uint64_t>(entry.top.size());
    for (const auto& [id, logprob] : entry.top) {
      w.scalar(id);
      w.scalar(logprob);
    }
  }
}

engine::SampleOutput decode_sample(Reader& r) {
  engine::SampleOutput sample;
  sample.token_ids = r.scalars<int32_t>("token_ids");
  sample.finish_reason = r.string("finish_reason");
  sample.text = r.optional<std::string>("text");
  sample.stop_string = r.optional<std::string>("stop_string");
  sample.stop_token = r.optional<int32_t>("stop_token");
  sample.logprobs.resize(r.count("logprobs", sizeof(int32_t) + sizeof(double) + sizeof(uint64_t)));
  for (sampling::TokenLogprob& entry : sample.logprobs) {
    entry.token = r.scalar<int32_t>("logprob token");
    entry.logprob = r.scalar<double>("logprob");
    entry.top.resize(r.count("top logprobs", sizeof(int32_t) + sizeof(double)));
    for (auto& [id, logprob] : entry.top) {
      id = r.scalar<int32_t>("top logprob token");
      logprob = r.scalar<double>("top logprob");
    }
  }
  return sample;
}

}  // namespace

void encode_request_outputs(const std::vector<engine::RequestOutput>& outputs, std::vector<uint8_t>& out) {
  Writer w(out);
  w.scalar<uint64_t>(outputs.size());
  for (const engine::RequestOutput& o : outputs) {
    w.string(o.id);
    w.string(o.id_json);
    w.scalar<uint64_t>(o.outputs.size());
    for (const engine::SampleOutput& sample : o.outputs) encode_sample(sample, w);
    w.scalar(o.prompt_tokens);
    w.scalar(o.output_tokens);
    w.scalar(o.cached_prompt_tokens);
    w.scalar(o.num_preemptions);
    w.scalar(o.time_s);
    w.scalar(o.queue_s);
    w.scalar(o.ttft_s);
    w.scalar(o.e2e_s);
    w.scalars(o.token_times_s);
  }
}

Result<std::vector<engine::RequestOutput>> decode_request_outputs(const uint8_t* bytes, size_t size, size_t* offset) {
  Reader r(bytes, size, *offset);
  // Every record holds at least its two string lengths and its sample count.
  std::vector<engine::RequestOutput> outputs(r.count("requests", 3 * sizeof(uint64_t)));
  for (engine::RequestOutput& o : outputs) {
    o.id = r.string("id");
    o.id_json = r.string("id_json");
    // A sample holds at least three lengths (token ids, finish reason, logprobs) and three flags.
    o.outputs.resize(r.count("samples", 3 * sizeof(uint64_t) + 3));
    for (engine::SampleOutput& sample : o.outputs) sample = decode_sample(r);
    o.prompt_tokens = r.scalar<int64_t>("prompt_tokens");
    o.output_tokens = r.scalar<int64_t>("output_tokens");
    o.cached_prompt_tokens = r.scalar<int64_t>("cached_prompt_tokens");
    o.num_preemptions = r.scalar<int>("num_preemptions");
    o.time_s = r.scalar<double>("time_s");
    o.queue_s = r.scalar<double>("queue_s");
    o.ttft_s = r.scalar<double>("ttft_s");
    o.e2e_s = r.scalar<double>("e2e_s");
    o.token_times_s = r.scalars<double>("token_times_s");
    if (!r.error().empty()) break;
  }
  if (!r.error().empty()) return internal_error(r.error());
  *offset = r.offset();
  return outputs;
}

}  // namespace moert::parallel

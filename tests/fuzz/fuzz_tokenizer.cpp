// libFuzzer target: the tokenizer on hostile input. The first byte picks the mode: even, the
// rest is a tokenizer.json (load must end in a tokenizer or std::runtime_error); odd, the rest
// is text encoded by the real Qwen3 tokenizer and decoded back (whole and incrementally; the
// pieces concatenate to the whole decode and each is valid UTF-8 by construction).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "text/tokenizer/tokenizer.h"

#ifndef MOERT_FUZZ_TOKENIZER_DIR
#error "MOERT_FUZZ_TOKENIZER_DIR must name a folder holding tokenizer.json"
#endif

namespace {
// Loaded once before fuzzing starts (LLVMFuzzerInitialize): the load of a 150k-token
// tokenizer.json takes seconds under ASan and must not count against one input's timeout.
const moert::text::Tokenizer* qwen3 = nullptr;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  qwen3 = new moert::text::Tokenizer(moert::text::Tokenizer::load(MOERT_FUZZ_TOKENIZER_DIR));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 0) {
    try {
      const moert::text::Tokenizer tokenizer = moert::text::Tokenizer::from_json(rest);
      (void)tokenizer.encode("Hello, world! 123 <|im_start|>");
    } catch (const std::runtime_error&) {
    }
    return 0;
  }
  const std::vector<int32_t> ids = qwen3->encode(rest);
  const std::string whole = qwen3->decode(ids, false);
  moert::text::IncrementalDecoder stream(*qwen3, false);
  std::string pieces;
  for (int32_t id : ids) pieces += stream.push(id);
  pieces += stream.finish();
  if (pieces != whole) __builtin_trap();
  return 0;
}

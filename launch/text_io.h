// Text in and text out for `moert run` (docs/tokenizer.md): rank 0 turns a request's "prompt"
// text into "prompt_token_ids" with the checkpoint's tokenizer before anything else reads the
// line, and adds "text" (the decode of each sample's ids, special tokens skipped) to every
// result line. Without tokenizer.json (or in a build without the tokenizer) id requests work
// as before and a text prompt is an error for its line.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"

namespace moert::launch {

class TextCodec {
 public:
  // The tokenizer of model_dir when it holds tokenizer.json, else null. Throws CommandError
  // for a tokenizer.json moert cannot load (naming the file and the problem).
  static std::unique_ptr<TextCodec> load_if_present(const std::string& model_dir);
  ~TextCodec();

  // `line` with "prompt" (a string) replaced by "prompt_token_ids"; other lines unchanged.
  Result<std::string> encode_line(const std::string& line) const;
  // `line` (a result) with "text" added to each of its outputs.
  std::string decode_line(const std::string& line) const;

 private:
  struct Impl;
  explicit TextCodec(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What a line with a text "prompt" gets when there is no tokenizer.
Status text_prompt_without_tokenizer(const std::string& model_dir);

}  // namespace moert::launch

#include "runtime/engine/guided_decoding.h"

#include <algorithm>
#include <limits>

#include "text/grammar/constraint.h"

namespace moert::engine {

Result<std::shared_ptr<grammar::GrammarMasks>> GuidedDecoding::grammar_for(const sampling::SamplingParams& params) {
  if (trie_ == nullptr && !vocabulary_error_.has_value()) {
    if (!source_) {
      vocabulary_error_ = invalid_argument("structured output (response_format, guided_*) needs the checkpoint's tokenizer (tokenizer.json)");
    } else {
      Result<std::shared_ptr<const grammar::TokenTrie>> trie = source_();
      if (trie.is_ok()) {
        trie_ = std::move(trie).value();
      } else {
        vocabulary_error_ = trie.status();
      }
    }
  }
  if (vocabulary_error_.has_value()) return *vocabulary_error_;
  std::string key = params.guided_kind;
  key += '\0';
  key += params.guided_spec;
  if (auto it = grammars_.find(key); it != grammars_.end()) return it->second;
  MOERT_ASSIGN_OR_RETURN(grammar::Grammar g, grammar::compile_constraint(params.guided_kind, params.guided_spec));
  auto masks = std::make_shared<grammar::GrammarMasks>(std::move(g), trie_);
  grammars_.emplace(std::move(key), masks);
  return masks;
}

bool is_terminal_token(const sampling::SamplingParams& params, int32_t token) {
  const auto has = [&](const std::vector<int32_t>& ids) { return std::find(ids.begin(), ids.end(), token) != ids.end(); };
  return has(params.stop_token_ids) || (!params.ignore_eos && has(params.eos_token_ids));
}

int mask_logits(grammar::GrammarMasks& grammar, int32_t state, const sampling::SamplingParams& params, float* row,
                int vocab_size) {
  const grammar::TokenBitmask& mask = grammar.mask(state);
  const bool accepting = grammar.automaton().accepting(state);
  const int trie_vocab = std::min(vocab_size, grammar.trie().vocab_size());
  // Terminal ids (EOS, stop ids) are allowed exactly in accepting states, whatever their bytes.
  std::vector<int32_t> terminal;
  for (const std::vector<int32_t>* ids : {&params.stop_token_ids, &params.eos_token_ids}) {
    for (int32_t id : *ids) {
      if (id >= 0 && id < vocab_size && is_terminal_token(params, id) &&
          std::find(terminal.begin(), terminal.end(), id) == terminal.end()) {
        terminal.push_back(id);
      }
    }
  }
  // Count first, so that a row that would allow nothing is left untouched.
  int allowed = 0;
  for (int w = 0; w < (trie_vocab + 63) / 64; ++w) {
    uint64_t bits = mask[static_cast<size_t>(w)];
    if ((w + 1) * 64 > trie_vocab) bits &= (uint64_t{1} << (trie_vocab - w * 64)) - 1;
    allowed += __builtin_popcountll(bits);
  }
  for (int32_t id : terminal) {
    const bool in_mask = id < trie_vocab && grammar::mask_allows(mask, id);
    allowed += (accepting && !in_mask) - (!accepting && in_mask);
  }
  if (allowed == 0) return 0;
  std::vector<float> terminal_values;
  for (int32_t id : terminal) terminal_values.push_back(row[id]);
  grammar::apply_token_mask(mask, grammar.trie().vocab_size(), row, vocab_size);
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < terminal.size(); ++i) row[terminal[i]] = accepting ? terminal_values[i] : kMasked;
  return allowed;
}

}  // namespace moert::engine

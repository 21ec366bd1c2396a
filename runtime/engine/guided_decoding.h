// The engine's side of structured output (docs/structured-output.md): compiled grammars cached
// by their constraint, and the mask a sample's grammar state puts on a row of logits.
//
// Rules: a token is allowed when the grammar accepts all its bytes from the state; tokens without
// bytes (special tokens, ids the tokenizer lacks) never are, except that EOS ids and stop ids are
// allowed exactly in accepting states (not with ignore_eos for EOS). A sample whose grammar is
// complete (accepting, nothing can follow) finishes with "stop" at once.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/status.h"
#include "runtime/sampling/sampler.h"
#include "text/grammar/token_mask.h"

namespace moert::engine {

class GuidedDecoding {
 public:
  // Where the tokenizer's vocabulary as bytes comes from (launch/ builds it), called once, at the
  // first constrained request; none: constrained requests are refused.
  using VocabularySource = std::function<Result<std::shared_ptr<const grammar::TokenTrie>>()>;
  void set_vocabulary(VocabularySource source) { source_ = std::move(source); }
  // The compiled grammar of `params`' constraint, compiled once per distinct constraint. Errors
  // name the problem (an unsupported schema keyword, a regex construct, a GBNF syntax error).
  Result<std::shared_ptr<grammar::GrammarMasks>> grammar_for(const sampling::SamplingParams& params);
  size_t num_grammars() const { return grammars_.size(); }

 private:
  VocabularySource source_;
  std::shared_ptr<const grammar::TokenTrie> trie_;
  std::optional<Status> vocabulary_error_;
  std::unordered_map<std::string, std::shared_ptr<grammar::GrammarMasks>> grammars_;
};

// Sets the logits of the tokens `state` does not allow to -inf in row[0, vocab_size) (ids past the
// trie's vocabulary are never allowed). Returns the number of allowed ids; 0 leaves the row as it was.
int mask_logits(grammar::GrammarMasks& grammar, int32_t state, const sampling::SamplingParams& params, float* row,
                int vocab_size);
// Whether `token` ends the sample by the stop rule (an EOS id unless ignore_eos, or a stop id):
// such tokens do not advance the grammar.
bool is_terminal_token(const sampling::SamplingParams& params, int32_t token);

}  // namespace moert::engine

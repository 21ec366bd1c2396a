// Token sampling for one row of logits: temperature, top-k, top-p (applied in that order,
// as vLLM applies them), the inverse-CDF draw and the stop rule.
//
// Shape legend: V vocabulary size. logits are [V] float, probabilities [V] double.
//
// Randomness is passed in: every draw takes a `uniform` in [0, 1) from the caller, so the
// sampler is a pure function under test. counter_uniform() makes those uniforms from
// (seed, stream, counter), so a request's tokens never depend on batching or on other
// requests.
//
// Terms: the *support* is the set of token ids of non-zero probability after all filters.
// Orderings "by probability" are descending probability with ties broken by lower id.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace moert::sampling {

// The most alternatives a request may ask log-probabilities for (OpenAI allows 20).
inline constexpr int kMaxLogprobs = 20;

// Per-request sampling parameters as in the JSONL input. Validate once with
// validate_sampling_params() before handing them to the functions below.
struct SamplingParams {
  // Softmax temperature; logits are divided by it. 0 = greedy (argmax, lowest id wins
  // ties), which ignores top_k, top_p and the uniform. Default 0.
  float temperature = 0.0f;
  // Keep only the top_k most probable tokens (ties: the lower id is kept). 0 = off; a value
  // >= V keeps every token. Default 0.
  int top_k = 0;
  // Nucleus: keep the smallest set, taken by probability (ties lower id first), whose mass
  // is >= top_p; always keeps at least one token. 1 = off. Default 1.
  float top_p = 1.0f;
  // -1 = the caller derives the seed from the request's position in the input; any other
  // value makes the request reproducible on its own. Default -1.
  int64_t seed = -1;
  // Number of parallel samples of one prompt (stream index 0..n-1). Default 1.
  int n = 1;
  // Generated tokens per sample before finishing with "length". Default 16.
  int max_tokens = 16;
  // Generating any of these finishes the sample with "stop" (the token is kept in the
  // output). Default none.
  std::vector<int32_t> stop_token_ids;
  // The model's end-of-sequence ids (generation_config.json, docs/generation.md), filled by
  // the engine, not by requests: they finish a sample with "stop" like stop_token_ids, unless
  // ignore_eos. Default none.
  std::vector<int32_t> eos_token_ids;
  bool ignore_eos = false;
  // Strings that finish a sample with "stop" when the decoded text contains one (also across
  // token boundaries); the text is cut before it. Needs the checkpoint's tokenizer (engine).
  std::vector<std::string> stop;
  // No stop rule (stop ids, EOS, stop strings) applies before this many tokens; stop and EOS
  // ids are masked out of the logits until then. Default 0.
  int min_tokens = 0;
  // Penalties (logit_adjustments.h), applied to the logits before temperature: OpenAI's
  // presence and frequency penalties over the generated tokens ([-2, 2], 0 = off) and the
  // CTRL/Hugging Face repetition penalty over prompt and generated tokens (> 0, 1 = off).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  // -1: no log-probabilities; k in [0, 20]: the log-probability of every sampled token under
  // the model's raw distribution plus the k most likely alternatives (logprobs.h).
  int logprobs = -1;
  // Structured output (docs/structured-output.md): the grammar every sample follows, compiled by
  // the engine (text/grammar/constraint.h). guided_kind: "" (none), "json_object",
  // "json_schema", "regex", "grammar" (GBNF) or "choice"; guided_spec: the schema as JSON text,
  // the regex, the GBNF text, or the choices as a JSON array. Default none.
  std::string guided_kind;
  std::string guided_spec;

  bool is_guided() const { return !guided_kind.empty(); }
  bool is_greedy() const { return temperature == 0.0f; }
  // True when the logits must be adjusted with the sample's token history before sampling
  // (penalties, or min_tokens still masking stop ids): logit_adjustments.h.
  bool adjusts_logits() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f || min_tokens > 0;
  }
};

// Checks: temperature finite and >= 0, top_k >= 0, top_p in (0, 1], n >= 1,
// max_tokens >= 1, min_tokens in [0, max_tokens], presence and frequency penalties in
// [-2, 2], repetition_penalty finite and > 0, logprobs in [-1, 20], stop strings non-empty.
// The error names the value, e.g. "top_p = 1.5 must be in (0, 1]".
Status validate_sampling_params(const SamplingParams& p);

// Writes into *probs ([V], resized) the distribution after temperature, top-k and top-p,
// renormalised over the support; computed in double. Greedy: one-hot at the argmax.
// Precondition: p is valid; logits has vocab_size >= 1 entries, none NaN or +inf, at
// least one finite (-inf masks a token). Broken preconditions abort via MOERT_CHECK.
// Cost: O(V) exps; top-k by nth_element (O(V)); top-p by a heap popped only until the
// nucleus is complete (O(V + m log V) for a nucleus of m tokens).
void sampling_distribution(const float* logits, int vocab_size, const SamplingParams& p,
                           std::vector<double>* probs);

// Draws one token. Greedy: argmax (lowest id on ties), `uniform` and `scratch` unused.
// Otherwise: sampling_distribution() into *scratch, then sample_from_distribution().
// Never returns a token of probability 0. `uniform` must be in [0, 1).
int32_t sample_token(const float* logits, int vocab_size, const SamplingParams& p,
                     double uniform, std::vector<double>* scratch);

// Inverse CDF over `probs` in ascending token-id order: returns the first id whose
// cumulative mass exceeds uniform * sum(probs). `probs` are non-negative finite weights
// (need not sum to 1) with at least one > 0; `uniform` in [0, 1). Never returns an id of
// weight 0 (rounding near uniform -> 1 falls back to the last id of positive weight).
int32_t sample_from_distribution(const std::vector<double>& probs, double uniform);

// Counter-based uniform in [0, 1) with 53 random bits: a pure function of
// (seed, stream, counter), built from splitmix64 finalisers. stream = sample index within
// a request, counter = output position. For fixed seed and stream the map counter -> bits
// is a bijection (likewise stream -> bits for fixed seed and counter).
double counter_uniform(uint64_t seed, uint64_t stream, uint64_t counter);

// Stop rule after `token` was generated; num_generated counts the sample's generated
// tokens including `token`. Returns "stop" if num_generated >= min_tokens and token is in
// stop_token_ids or (unless ignore_eos) eos_token_ids (checked first), "length" if
// num_generated >= max_tokens, otherwise nullopt (continue). Stop strings are the engine's.
// is_stop_token tells the stop ids and EOS ids that finish_reason would stop on (min_tokens
// aside): what min_tokens masks.
std::optional<std::string> finish_reason(const SamplingParams& p, int32_t token, int num_generated);
bool is_stop_token(const SamplingParams& p, int32_t token);

}  // namespace moert::sampling

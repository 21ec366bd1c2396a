// Structured-output costs on a tokenizer's vocabulary (bench/structured.sh prints them; figures in
// docs/perf/structured-output.md): compiling a 50-property schema, a state's first mask (the trie
// walk), a cached mask, and applying a mask to one row of logits; then the masks of a batch-16
// decode inside one long free string (the 400-character schema of bench/structured.sh).
//   bench_grammar_masks <dir holding tokenizer.json> [repeats=20]
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/grammar/constraint.h"
#include "text/grammar/token_mask.h"
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/tokenizer.h"

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_grammar_masks <tokenizer dir> [repeats]\n");
    return 2;
  }
  using namespace moert;
  const int repeats = argc > 2 ? std::stoi(argv[2]) : 20;
  const text::Tokenizer tokenizer = text::Tokenizer::load(argv[1]);
  auto t = std::chrono::steady_clock::now();
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.is_special(id)) continue;
    if (auto token = tokenizer.id_to_token(id)) bytes[static_cast<size_t>(id)] = text::byte_level_to_bytes(*token);
  }
  auto trie = std::make_shared<const grammar::TokenTrie>(bytes);
  std::printf("vocabulary: %d ids, trie of %zu nodes built in %.1f ms\n", trie->vocab_size(), trie->num_nodes(), ms_since(t));

  nlohmann::ordered_json schema = {{"type", "object"}, {"additionalProperties", false}};
  std::string instance = "{";
  for (int i = 0; i < 50; ++i) {
    const std::string name = "field_" + std::to_string(i);
    const int kind = i % 5;
    schema["properties"][name] = kind == 0   ? nlohmann::ordered_json{{"type", "string"}, {"maxLength", 20}}
                                 : kind == 1 ? nlohmann::ordered_json{{"type", "integer"}, {"minimum", 0}, {"maximum", 1000}}
                                 : kind == 2 ? nlohmann::ordered_json{{"enum", {"a", "b", "c"}}}
                                 : kind == 3 ? nlohmann::ordered_json{{"type", "string"}, {"format", "date"}}
                                             : nlohmann::ordered_json{{"type", "array"}, {"items", {{"type", "boolean"}}}, {"maxItems", 4}};
    if (i % 2 == 0) schema["required"].push_back(name);
    const char* value = kind == 0 ? "\"hello\"" : kind == 1 ? "42" : kind == 2 ? "\"b\"" : kind == 3 ? "\"2024-02-29\"" : "[true, false]";
    instance += (i ? ", " : "") + nlohmann::json(name).dump() + ": " + value;
  }
  instance += "}";
  const std::string spec = schema.dump();
  double compile_ms = 0.0, first_mask_ms = 0.0;
  for (int r = 0; r < repeats; ++r) {
    t = std::chrono::steady_clock::now();
    grammar::Grammar g = grammar::compile_constraint("json_schema", spec).value();
    grammar::GrammarMasks masks(std::move(g), trie);
    compile_ms += ms_since(t);
    t = std::chrono::steady_clock::now();
    (void)masks.mask(masks.automaton().initial());
    first_mask_ms += ms_since(t);
  }
  std::printf("50-property schema: compiled in %.3f ms (grammar + automaton), first mask %.3f ms (mean of %d)\n",
              compile_ms / repeats, first_mask_ms / repeats, repeats);

  // Masks along the instance: every state once uncached, then cached, then applied to a row.
  grammar::GrammarMasks masks(grammar::compile_constraint("json_schema", spec).value(), trie);
  std::vector<int32_t> states{masks.automaton().initial()};
  for (char c : instance) states.push_back(masks.automaton().advance(states.back(), static_cast<uint8_t>(c)));
  t = std::chrono::steady_clock::now();
  for (int32_t s : states) (void)masks.mask(s);
  const double walk_ms = ms_since(t) / static_cast<double>(states.size());
  t = std::chrono::steady_clock::now();
  uint64_t sink = 0;
  for (int r = 0; r < repeats; ++r) {
    for (int32_t s : states) sink += masks.mask(s)[0];
  }
  const double cached_us = 1e3 * ms_since(t) / (static_cast<double>(states.size()) * repeats);
  std::vector<float> row(static_cast<size_t>(trie->vocab_size()), 0.5f);
  t = std::chrono::steady_clock::now();
  for (int r = 0; r < repeats; ++r) {
    for (int32_t s : states) {
      grammar::apply_token_mask(masks.mask(s), trie->vocab_size(), row.data(), trie->vocab_size());
    }
  }
  const double apply_us = 1e3 * ms_since(t) / (static_cast<double>(states.size()) * repeats);
  std::printf("per step over %zu states of one instance: first walk %.3f ms, cached mask %.3f us, mask applied to a row "
              "of %d logits %.1f us (%llu)\n",
              states.size(), walk_ms, cached_us, trie->vocab_size(), apply_us, static_cast<unsigned long long>(sink % 2));

  // Baseline: the mask by a scan of the whole vocabulary (every token's bytes run through the
  // automaton, its transitions already memoized), as a decoder without the per-state cache does
  // each step. Every 16th state of the instance; the masks must equal the cached ones.
  size_t scanned = 0, mismatches = 0;
  t = std::chrono::steady_clock::now();
  for (size_t i = 0; i < states.size(); i += 16, ++scanned) {
    grammar::TokenBitmask scan(masks.mask(states[i]).size(), 0);
    for (int32_t id = 0; id < trie->vocab_size(); ++id) {
      if (masks.advance_token(states[i], id) != grammar::Automaton::kDead) scan[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    }
    mismatches += scan != masks.mask(states[i]);
  }
  const double scan_us = 1e3 * ms_since(t) / static_cast<double>(scanned);
  std::printf("full vocabulary scan baseline over %zu states: %.1f us a step (%.0fx the cached mask + apply); "
              "%zu masks differ from the cached ones\n",
              scanned, scan_us, scan_us / (cached_us + apply_us), mismatches);
  std::printf("automaton: %zu states, %zu cached masks\n", masks.automaton().num_states(), masks.num_cached_masks());

  // A decode inside one free string of >= 400 characters, as bench/structured.sh's end-to-end run
  // does it: 2 x 16 samples of 64 tokens, each token drawn uniformly among the allowed ones (a
  // random model is near uniform), one grammar and mask cache for all. Every 16 masks are a step.
  const std::string text_spec =
      R"({"type":"object","additionalProperties":false,"required":["text"],"properties":{"text":{"type":"string","minLength":400}}})";
  grammar::GrammarMasks text_masks(grammar::compile_constraint("json_schema", text_spec).value(), trie);
  std::mt19937_64 rng(7);
  std::vector<int32_t> allowed;
  size_t text_mismatches = 0;
  double text_ms = 0.0;  // in mask() only
  for (int batch = 0; batch < 2; ++batch) {
    std::vector<int32_t> sample_states(16, text_masks.automaton().initial());
    for (int step = 0; step < 64; ++step) {
      for (int32_t& s : sample_states) {
        t = std::chrono::steady_clock::now();
        const grammar::TokenBitmask& mask = text_masks.mask(s);
        text_ms += ms_since(t);
        if (step % 16 == 15 && &s == &sample_states[0]) text_mismatches += mask != trie->walk(text_masks.automaton(), s);
        allowed.clear();
        for (int32_t id = 0; id < trie->vocab_size(); ++id) {
          if (grammar::mask_allows(mask, id)) allowed.push_back(id);
        }
        s = text_masks.advance_token(s, allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)]);
      }
    }
  }
  std::printf("400-char free string, 2 x 16 samples x 64 tokens: %.2f ms of masks per batch-16 step (%zu walks, %zu "
              "automaton states); %zu of 8 spot-checked masks differ from a fresh walk\n",
              text_ms / 128.0, text_masks.num_mask_walks(), text_masks.automaton().num_states(), text_mismatches);
  return mismatches == 0 && text_mismatches == 0 ? 0 : 1;
}

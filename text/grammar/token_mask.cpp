#include "text/grammar/token_mask.h"

#include <algorithm>
#include <limits>

namespace moert::grammar {

void apply_token_mask(const TokenBitmask& mask, int32_t mask_vocab, float* row, int32_t vocab_size) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  const int32_t covered = std::min(mask_vocab, vocab_size);
  const int32_t full_words = covered / 64;
  for (int32_t w = 0; w < full_words; ++w) {
    const uint64_t bits = mask[static_cast<size_t>(w)];
    if (bits == ~uint64_t{0}) continue;
    float* base = row + static_cast<size_t>(w) * 64;
    if (bits == 0) {
      std::fill(base, base + 64, kMasked);
      continue;
    }
    // Only the disallowed ids are visited (few inside a free string, where most words are partial).
    for (uint64_t missing = ~bits; missing != 0; missing &= missing - 1) base[__builtin_ctzll(missing)] = kMasked;
  }
  for (int32_t id = full_words * 64; id < vocab_size; ++id) {
    if (id >= covered || !mask_allows(mask, id)) row[id] = kMasked;
  }
}

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes)
    : vocab_size_(static_cast<int32_t>(token_bytes.size())), token_bytes_(token_bytes) {
  std::vector<int32_t> order;
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    if (!token_bytes[id].empty()) order.push_back(static_cast<int32_t>(id));
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes[static_cast<size_t>(a)] < token_bytes[static_cast<size_t>(b)] ||
           (token_bytes[static_cast<size_t>(a)] == token_bytes[static_cast<size_t>(b)] && a < b);
  });
  // Sorted keys make the trie in preorder: each key shares its longest common prefix with the
  // previous one; the nodes past it close (their subtrees end here) and new nodes follow.
  bytes_.push_back(0);
  depths_.push_back(0);
  subtree_ends_.push_back(0);
  std::vector<int32_t> path{0};  // node of each depth along the current key
  std::vector<int32_t> parents{-1};  // [node]
  std::vector<std::vector<int32_t>> ids_at;  // per node
  ids_at.emplace_back();
  const std::string* previous = nullptr;
  for (int32_t id : order) {
    const std::string& key = token_bytes[static_cast<size_t>(id)];
    size_t common = 0;
    if (previous != nullptr) {
      while (common < key.size() && common < previous->size() && key[common] == (*previous)[common]) ++common;
    }
    while (path.size() > common + 1) {
      subtree_ends_[static_cast<size_t>(path.back())] = static_cast<int32_t>(bytes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < key.size(); ++d) {
      parents.push_back(path.back());
      path.push_back(static_cast<int32_t>(bytes_.size()));
      bytes_.push_back(static_cast<uint8_t>(key[d]));
      depths_.push_back(static_cast<int32_t>(d + 1));
      subtree_ends_.push_back(0);
      ids_at.emplace_back();
    }
    ids_at[static_cast<size_t>(path.back())].push_back(id);
    previous = &key;
  }
  for (int32_t node : path) subtree_ends_[static_cast<size_t>(node)] = static_cast<int32_t>(bytes_.size());
  // Parents precede their children in preorder: one backward pass lifts each subtree's depth.
  subtree_max_depths_ = depths_;
  for (size_t node = bytes_.size(); node-- > 1;) {
    int32_t& up = subtree_max_depths_[static_cast<size_t>(parents[node])];
    up = std::max(up, subtree_max_depths_[node]);
  }
  token_starts_.push_back(0);
  for (const auto& ids : ids_at) {
    token_ids_.insert(token_ids_.end(), ids.begin(), ids.end());
    token_starts_.push_back(static_cast<int32_t>(token_ids_.size()));
  }
}

TokenBitmask TokenTrie::walk(Automaton& automaton, int32_t state, int32_t min_bytes, int32_t max_bytes) const {
  TokenBitmask mask((static_cast<size_t>(vocab_size_) + 63) / 64, 0);
  std::vector<int32_t> state_at(1, state);  // [depth] the state after the node's bytes
  const int32_t n = static_cast<int32_t>(bytes_.size());
  for (int32_t node = 1; node < n;) {
    const int32_t node_depth = depths_[static_cast<size_t>(node)];
    if (node_depth > max_bytes || subtree_max_depths_[static_cast<size_t>(node)] <= min_bytes) {
      node = subtree_ends_[static_cast<size_t>(node)];  // no token of the band below
      continue;
    }
    const size_t depth = static_cast<size_t>(node_depth);
    const int32_t parent_state = state_at[depth - 1];
    const uint8_t byte = bytes_[static_cast<size_t>(node)];
    const int32_t next = automaton.next_bytes(parent_state).test(byte) ? automaton.advance(parent_state, byte) : Automaton::kDead;
    if (next == Automaton::kDead) {
      node = subtree_ends_[static_cast<size_t>(node)];
      continue;
    }
    if (state_at.size() <= depth) state_at.resize(depth + 1);
    state_at[depth] = next;
    if (node_depth > min_bytes) {
      for (int32_t t = token_starts_[static_cast<size_t>(node)]; t < token_starts_[static_cast<size_t>(node) + 1]; ++t) {
        const int32_t id = token_ids_[static_cast<size_t>(t)];
        mask[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
      }
    }
    ++node;
  }
  return mask;
}

GrammarMasks::GrammarMasks(Grammar grammar, std::shared_ptr<const TokenTrie> trie, size_t max_cached_masks)
    : automaton_(std::move(grammar)), trie_(std::move(trie)), max_cached_masks_(std::max<size_t>(2, max_cached_masks)) {
  whole_classes_.horizon = std::max(1, trie_->max_token_bytes());
  short_classes_.horizon = std::min(kShortTokenBytes, whole_classes_.horizon);
}

int32_t GrammarMasks::class_of(Classes& classes, int32_t state) {
  if (classes.of_state.size() <= static_cast<size_t>(state)) classes.of_state.resize(automaton_.num_states(), -1);
  int32_t& id = classes.of_state[static_cast<size_t>(state)];
  if (id < 0) {
    automaton_.horizon_key(state, classes.horizon, &key_);
    id = classes.ids.try_emplace(key_, static_cast<int32_t>(classes.ids.size())).first->second;
  }
  return id;
}

const TokenBitmask& GrammarMasks::mask(int32_t state) {
  const int32_t whole_class = class_of(whole_classes_, state);
  if (auto it = masks_.find(whole_class); it != masks_.end()) return it->second;
  // A miss stores up to two masks.
  if (num_cached_masks() + 2 > max_cached_masks_) {
    masks_.clear();
    short_masks_.clear();
  }
  const int32_t short_class = class_of(short_classes_, state);
  auto short_it = short_masks_.find(short_class);
  if (short_it == short_masks_.end()) {
    ++num_walks_;
    short_it = short_masks_.emplace(short_class, trie_->walk(automaton_, state, 0, short_classes_.horizon)).first;
  }
  // The short tokens' verdicts come from any state of this short class; the long ones from this
  // state, and the sum holds for every state of its whole class.
  TokenBitmask mask = trie_->walk(automaton_, state, short_classes_.horizon);
  for (size_t w = 0; w < mask.size(); ++w) mask[w] |= short_it->second[w];
  return masks_.emplace(whole_class, std::move(mask)).first->second;
}

int32_t GrammarMasks::advance_token(int32_t state, int32_t id) {
  if (id < 0 || id >= trie_->vocab_size()) return Automaton::kDead;
  const std::string& bytes = trie_->token_bytes(id);
  if (bytes.empty()) return Automaton::kDead;
  return automaton_.advance_bytes(state, bytes);
}

}  // namespace moert::grammar

#include "text/tokenizer/bpe.h"

#include <cstdio>
#include <queue>
#include <stdexcept>

#include "text/tokenizer/unicode.h"

namespace moert::text {

BpeModel::BpeModel(Vocabulary vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  id_to_token_.reserve(vocab_.size());
  for (const auto& [token, id] : vocab_) {
    if (id < 0) throw std::invalid_argument("vocab entry \"" + token + "\" has a negative id");
    id_to_token_.emplace(id, token);
    if (id > max_id_) max_id_ = id;
  }
  const size_t prefix_length = options_.continuing_subword_prefix ? options_.continuing_subword_prefix->size() : 0;
  merges_.reserve(merges.size());
  std::string merged;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto left_id = token_to_id(left), right_id = token_to_id(right);
    // The merged token drops the right part's continuing-subword prefix.
    merged.assign(left);
    if (right.size() >= prefix_length) merged.append(right, prefix_length);
    const auto merged_id = token_to_id(merged);
    if (!left_id || !right_id || !merged_id) {
      const std::string& missing = !left_id ? left : !right_id ? right : merged;
      throw std::invalid_argument("merge " + std::to_string(rank) + " (\"" + left + "\", \"" + right +
                                  "\") uses \"" + missing + "\", which is not in the vocabulary");
    }
    merges_[pair_key(*left_id, *right_id)] = Merge{static_cast<uint32_t>(rank), *merged_id};
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  const auto it = id_to_token_.find(id);
  return it == id_to_token_.end() ? nullptr : &it->second;
}

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {
    if (const auto id = token_to_id(piece)) {
      ids.push_back(*id);
      return;
    }
  }

  // The word as a doubly linked list of symbols; a symbol merged into its left neighbour keeps
  // length 0 and is skipped (Hugging Face's Word).
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    size_t length;  // bytes of the piece it covers; 0 once merged away
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  auto add = [&symbols](int32_t id, size_t length) {
    const auto count = static_cast<int32_t>(symbols.size());
    if (count > 0) symbols.back().next = count;
    symbols.push_back({id, count - 1, -1, length});
  };

  std::optional<int32_t> unk_id;
  auto require_unk_id = [&]() {
    if (!unk_id) {
      unk_id = token_to_id(*options_.unk_token);
      if (!unk_id) throw std::runtime_error("unk_token \"" + *options_.unk_token + "\" is not in the vocabulary");
    }
    return *unk_id;
  };
  // A pending run of unknown characters (unk_length > 0 bytes), added when a known character
  // follows or at the end.
  size_t unk_length = 0;
  std::string spelled;
  for (size_t pos = 0; pos < piece.size();) {
    const size_t start = pos;
    next_codepoint(piece, pos);
    const size_t byte_length = pos - start;
    spelled.clear();
    if (start > 0 && options_.continuing_subword_prefix) spelled += *options_.continuing_subword_prefix;
    spelled.append(piece.substr(start, byte_length));
    if (pos == piece.size() && options_.end_of_word_suffix) spelled += *options_.end_of_word_suffix;

    if (const auto id = token_to_id(spelled)) {
      if (unk_length > 0) {
        add(*unk_id, unk_length);
        unk_length = 0;
      }
      add(*id, byte_length);
      continue;
    }
    if (options_.byte_fallback) {
      // Every byte must have its "<0xNN>" token, else the character falls through to unk.
      std::vector<int32_t> byte_ids;
      for (const char byte : spelled) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned>(static_cast<unsigned char>(byte)));
        const auto id = token_to_id(name);
        if (!id) break;
        byte_ids.push_back(*id);
      }
      if (byte_ids.size() == spelled.size()) {
        for (const int32_t id : byte_ids) add(id, 1);
        continue;
      }
    }
    if (options_.unk_token) {
      if (unk_length > 0 && options_.fuse_unk) {
        unk_length += byte_length;
      } else {
        if (unk_length > 0) add(*unk_id, unk_length);
        require_unk_id();
        unk_length = byte_length;
      }
    }
    // Without unk_token an unknown character is dropped.
  }
  if (unk_length > 0) add(*unk_id, unk_length);

  // Merge the lowest-ranked pair first, the leftmost among equal ranks; stale queue entries (the
  // pair no longer exists) are skipped when popped.
  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
  };
  auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  auto find_merge = [this](int32_t left, int32_t right) -> const Merge* {
    const auto it = merges_.find(pair_key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Merge* m = find_merge(symbols[i].id, symbols[i + 1].id)) {
      queue.push({m->rank, static_cast<int32_t>(i), m->new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& current = symbols[top.pos];
    if (current.length == 0 || current.next == -1) continue;
    const int32_t next_pos = current.next;
    const Symbol right = symbols[next_pos];
    const Merge* m = find_merge(current.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;

    current.id = top.new_id;
    current.length += right.length;
    current.next = right.next;
    symbols[next_pos].length = 0;
    if (right.next >= 0) symbols[right.next].prev = top.pos;

    if (current.prev >= 0) {
      if (const Merge* left_merge = find_merge(symbols[current.prev].id, current.id)) {
        queue.push({left_merge->rank, current.prev, left_merge->new_id});
      }
    }
    if (current.next >= 0) {
      if (const Merge* right_merge = find_merge(current.id, symbols[current.next].id)) {
        queue.push({right_merge->rank, top.pos, right_merge->new_id});
      }
    }
  }
  for (const Symbol& symbol : symbols) {
    if (symbol.length != 0) ids.push_back(symbol.id);
  }
}

}  // namespace moert::text

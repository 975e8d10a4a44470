#include "common/tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "common/tokenizer/byte_level.h"

namespace xserv::tokenizer {
namespace {

// Replaces every piece by its byte-level form, appended to the arena.
void MaterializeByteLevel(PreTokenizeScratch* s) {
  for (PieceRange& r : s->pieces) {
    const std::string raw = s->arena.substr(r.begin, r.end - r.begin);
    const auto begin = static_cast<uint32_t>(s->arena.size());
    AppendByteLevelEncoded(raw, &s->arena);
    r = {begin, static_cast<uint32_t>(s->arena.size())};
  }
}

struct Segment {
  PieceRange range;
  bool is_match;
};

}  // namespace

std::string_view PreTokenizer::Gpt2Pattern() {
  return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
}

void ApplySplitBehavior(const std::vector<RegexMatch>& matches, uint32_t size, uint32_t base,
                        SplitBehavior behavior, bool invert, std::vector<PieceRange>* out) {
  // HF Pattern::find_matches: the matches and the gaps between them, covering [0, size).
  thread_local std::vector<Segment> segments;
  segments.clear();
  if (size == 0) return;
  uint32_t prev = 0;
  for (const RegexMatch& m : matches) {
    if (m.begin != prev) segments.push_back({{prev, m.begin}, invert});
    segments.push_back({{m.begin, m.end}, !invert});
    prev = m.end;
  }
  if (prev != size) segments.push_back({{prev, size}, invert});

  const size_t first_out = out->size();
  auto emit = [&](PieceRange r) { out->push_back({r.begin + base, r.end + base}); };
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Segment& s : segments) emit(s.range);
      break;
    case SplitBehavior::kRemoved:
      for (const Segment& s : segments) {
        if (!s.is_match) emit(s.range);
      }
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Segment& s : segments) {
        if (s.is_match == previous_match && out->size() > first_out) {
          out->back().end = s.range.end + base;
        } else {
          emit(s.range);
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Segment& s : segments) {
        if (s.is_match && !previous_match && out->size() > first_out) {
          out->back().end = s.range.end + base;
        } else {
          emit(s.range);
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      // Walk backwards, merging each match into the piece that follows it.
      bool previous_match = false;
      for (size_t k = segments.size(); k-- > 0;) {
        const Segment& s = segments[k];
        if (s.is_match && !previous_match && out->size() > first_out) {
          out->back().begin = s.range.begin + base;
        } else {
          emit(s.range);
        }
        previous_match = s.is_match;
      }
      std::reverse(out->begin() + static_cast<ptrdiff_t>(first_out), out->end());
      break;
    }
  }
  // HF drops empty pieces (a regex can match the empty string).
  size_t w = first_out;
  for (size_t r = first_out; r < out->size(); ++r) {
    if ((*out)[r].end > (*out)[r].begin) (*out)[w++] = (*out)[r];
  }
  out->resize(w);
}

void PreTokenizer::SplitPieces(const PreTokenizerStep& step, PreTokenizeScratch* s) const {
  s->next.clear();
  for (size_t i = 0; i < s->pieces.size(); ++i) {
    const std::string_view piece = s->piece(i);
    s->matches.clear();
    step.regex->FindAll(piece, &s->matches);
    ApplySplitBehavior(s->matches, static_cast<uint32_t>(piece.size()), s->pieces[i].begin,
                       step.behavior, step.invert, &s->next);
  }
  s->pieces.swap(s->next);
}

bool PreTokenizer::Run(std::string_view text, PreTokenizeScratch* s) const {
  s->arena.assign(text.data(), text.size());
  s->pieces.clear();
  if (!text.empty()) s->pieces.push_back({0, static_cast<uint32_t>(text.size())});
  bool byte_level_pending = false;
  for (const PreTokenizerStep& step : steps_) {
    if (byte_level_pending) {
      MaterializeByteLevel(s);
      byte_level_pending = false;
    }
    if (step.kind == PreTokenizerStep::Kind::kByteLevel) {
      if (step.add_prefix_space) {
        for (PieceRange& r : s->pieces) {
          if (s->arena[r.begin] == ' ') continue;
          std::string piece(1, ' ');
          piece.append(s->arena, r.begin, r.end - r.begin);
          const auto begin = static_cast<uint32_t>(s->arena.size());
          s->arena.append(piece);
          r = {begin, static_cast<uint32_t>(s->arena.size())};
        }
      }
      if (step.regex != nullptr) SplitPieces(step, s);
      byte_level_pending = true;
    } else {
      SplitPieces(step, s);
    }
  }
  return byte_level_pending;
}

}  // namespace xserv::tokenizer

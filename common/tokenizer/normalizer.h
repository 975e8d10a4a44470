// Text normalizers of tokenizer.json ("normalizer"): Unicode NFC/NFD/NFKC/NFKD and Sequence.
// Any other type is refused at load with an error naming it.
//
// A Normalizer is immutable after construction; Normalize may be called from many threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace xserv::tokenizer {

enum class UnicodeForm { kNfc, kNfd, kNfkc, kNfkd };

class Normalizer {
 public:
  // `forms` are applied in order (a Sequence of Unicode normalizers); empty means identity.
  explicit Normalizer(std::vector<UnicodeForm> forms) : forms_(std::move(forms)) {}

  bool is_identity() const { return forms_.empty(); }

  // Normalizes valid UTF-8 `text`. Returns a view of `text` itself when nothing changes (the
  // common case, detected by a quick check) and otherwise a view of `*storage`.
  std::string_view Normalize(std::string_view text, std::string* storage) const;

 private:
  std::vector<UnicodeForm> forms_;
};

// True when `text` is certainly unchanged by NFC (every character is NFC-stable and cannot
// combine with its neighbour). Exposed for tests.
bool IsNfcQuickStable(std::string_view text);

}  // namespace xserv::tokenizer

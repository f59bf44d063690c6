// The normalizers of a tokenizer.json, as the tokenizers library applies them
// to each stretch of text between added tokens: NFC, NFD, NFKC, NFKD (ICU),
// Lowercase (each character's full lower case, as Rust's char::to_lowercase),
// Strip (White_Space), Prepend, Replace (a String or a Regex pattern, the
// content literal) and Sequence. Any other kind is refused naming it.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "dendrite/io/hf_json.h"
#include "dendrite/io/hf_regex.h"

namespace dendrite {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites text (valid UTF-8). A long stretch is normalized in pieces cut
  // before a "\n" or a " " (hf_tokenizer.cpp): seg_start / seg_end tell
  // whether this piece starts / ends the stretch (Prepend, Strip).
  virtual void normalize(std::string& text, bool seg_start, bool seg_end,
                         RegexScratch& scratch) const = 0;
  // Whether normalizing pieces cut before a "\n" or " " gives the whole's
  // normalization (false for a Regex Replace, or a String one that may span a cut).
  virtual bool keeps_cuts() const { return true; }
};

// The normalizer j describes (nullptr for JSON null); where: its key, for errors.
std::unique_ptr<Normalizer> read_normalizer(const nlohmann::json& j, const JsonWhere& where);

}  // namespace dendrite

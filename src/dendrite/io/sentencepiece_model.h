// The few fields of a SentencePiece model (its serialized ModelProto) that
// Dendrite reads or rewrites itself: the library installs no accessors for
// them. Field numbers and defaults as in sentencepiece_model.proto.
#pragma once

#include <string>
#include <string_view>

namespace dendrite {

struct SentencePieceSettings {
  // normalizer_spec
  bool add_dummy_prefix = true;          // (3) "▁" before the text
  bool remove_extra_whitespaces = true;  // (4)
  bool has_normalization_rules = false;  // (2) precompiled_charsmap is not empty
  // trainer_spec
  bool treat_whitespace_as_suffix = false;     // (24)
  std::string unk_surface = " \xE2\x81\x87 ";  // (44) what an unknown piece decodes to
};

// The settings of a serialized model; false if it is malformed.
bool read_sentencepiece_settings(std::string_view model_proto, SentencePieceSettings* settings);

// "" if every piece of a serialized model has text without a NUL byte;
// else what is wrong ("piece 3 is empty"). SentencePiece builds its tries of
// pieces with Darts, which throws on an empty key (a piece that is empty or
// starts with a NUL) past the library's status checks, and std::terminate
// follows (found by fuzz/sentencepiece_model_fuzz.cpp).
std::string sentencepiece_piece_fault(std::string_view model_proto);

// The same serialized model with normalizer_spec.add_dummy_prefix = false.
std::string without_dummy_prefix(std::string_view model_proto);

}  // namespace dendrite

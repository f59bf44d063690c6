// Reading and rewriting a few fields of a serialized SentencePiece ModelProto
// (sentencepiece_model.h), by the protobuf wire format: each field is a
// varint key (number << 3 | wire type) then a varint (type 0), 8 or 4 bytes
// (types 1, 5), or a varint length and that many bytes (type 2: strings and
// sub-messages).
#include "dendrite/io/sentencepiece_model.h"

#include <cstdint>
#include <string>

namespace dendrite {

namespace {

constexpr int kTrainerSpec = 2, kNormalizerSpec = 3;

bool read_varint(std::string_view data, size_t* pos, uint64_t* value) {
  *value = 0;
  for (int shift = 0; *pos < data.size() && shift < 64; shift += 7) {
    const auto byte = static_cast<unsigned char>(data[(*pos)++]);
    *value |= uint64_t(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

void write_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7F) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

struct Field {
  int number;
  uint64_t varint;         // wire type 0
  std::string_view bytes;  // wire type 2
  std::string_view raw;    // the whole field, key included
};

// Calls fn(field) for each field of a message; false if malformed.
template <class Fn>
bool for_each_field(std::string_view msg, Fn fn) {
  size_t pos = 0;
  while (pos < msg.size()) {
    const size_t start = pos;
    uint64_t key = 0;
    if (!read_varint(msg, &pos, &key)) return false;
    Field f{static_cast<int>(key >> 3), 0, {}, {}};
    const int wire = static_cast<int>(key & 7);
    if (wire == 0) {
      if (!read_varint(msg, &pos, &f.varint)) return false;
    } else if (wire == 2) {
      uint64_t length = 0;
      if (!read_varint(msg, &pos, &length) || length > msg.size() - pos) return false;
      f.bytes = msg.substr(pos, length);
      pos += length;
    } else if (wire == 1 || wire == 5) {
      pos += wire == 1 ? 8 : 4;
      if (pos > msg.size()) return false;
    } else {
      return false;  // groups (3, 4) are not used by the model
    }
    f.raw = msg.substr(start, pos - start);
    fn(f);
  }
  return true;
}

}  // namespace

bool read_sentencepiece_settings(std::string_view model_proto, SentencePieceSettings* s) {
  bool inner_ok = true;
  const bool ok = for_each_field(model_proto, [&](const Field& top) {
    if (top.number == kTrainerSpec) {
      inner_ok &= for_each_field(top.bytes, [&](const Field& f) {
        if (f.number == 24) s->treat_whitespace_as_suffix = f.varint != 0;
        if (f.number == 44) s->unk_surface = std::string(f.bytes);
      });
    } else if (top.number == kNormalizerSpec) {
      inner_ok &= for_each_field(top.bytes, [&](const Field& f) {
        if (f.number == 2) s->has_normalization_rules = !f.bytes.empty();
        if (f.number == 3) s->add_dummy_prefix = f.varint != 0;
        if (f.number == 4) s->remove_extra_whitespaces = f.varint != 0;
      });
    }
  });
  return ok && inner_ok;
}

std::string sentencepiece_piece_fault(std::string_view model_proto) {
  constexpr int kPieces = 1, kPieceText = 1;  // ModelProto.pieces, SentencePiece.piece
  std::string fault;
  int index = 0;
  for_each_field(model_proto, [&](const Field& top) {
    if (top.number != kPieces || !fault.empty()) return;
    bool has_text = false;
    for_each_field(top.bytes, [&](const Field& f) {
      if (f.number != kPieceText) return;
      has_text = true;
      if (f.bytes.empty())
        fault = "piece " + std::to_string(index) + " is empty";
      else if (f.bytes.find('\0') != std::string_view::npos)
        fault = "piece " + std::to_string(index) + " holds a NUL byte";
    });
    if (!has_text && fault.empty()) fault = "piece " + std::to_string(index) + " has no text";
    ++index;
  });
  return fault;
}

std::string without_dummy_prefix(std::string_view model_proto) {
  std::string out, spec;
  for_each_field(model_proto, [&](const Field& top) {
    if (top.number != kNormalizerSpec) {
      out += top.raw;
      return;
    }
    for_each_field(top.bytes, [&](const Field& f) {
      if (f.number != 3) spec += f.raw;
    });
  });
  spec += static_cast<char>(3 << 3);  // add_dummy_prefix, a varint
  spec += '\0';                       // = false
  out += static_cast<char>(kNormalizerSpec << 3 | 2);
  write_varint(out, spec.size());
  return out + spec;
}

}  // namespace dendrite

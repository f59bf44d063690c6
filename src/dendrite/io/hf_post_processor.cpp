// tokenizer.json post-processors (hf_post_processor.h).
#include "dendrite/io/hf_post_processor.h"

namespace dendrite {

namespace {

using json = nlohmann::json;

// TemplateProcessing's single template: [{"SpecialToken": {"id": NAME}} | {"Sequence": {"id":
// "A"}}].
SpecialIds read_template(const json& j, const JsonWhere& where) {
  const json& single = json_need(j, "single", json::value_t::array, where);
  const json specials = j.value("special_tokens", json::object());
  SpecialIds ids;
  bool seen_text = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const JsonWhere w = where.at("single").index(i);
    const json& piece = single[i];
    if (piece.is_object() && piece.contains("Sequence")) {
      DENDRITE_CHECK(!seen_text, "open_tokenizer: ", w.file, ": key ", w.key,
                     ": a single template with the text twice is not supported");
      seen_text = true;
      continue;
    }
    DENDRITE_CHECK(piece.is_object() && piece.contains("SpecialToken") &&
                       piece["SpecialToken"].is_object() &&
                       piece["SpecialToken"].value("id", json()).is_string(),
                   "open_tokenizer: ", w.file, ": key ", w.key, " is ", piece.dump(),
                   "; expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}");
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    DENDRITE_CHECK(specials.is_object() && specials.contains(name) && specials[name].is_object() &&
                       specials[name].value("ids", json()).is_array(),
                   "open_tokenizer: ", w.file, ": key ", where.key, ".special_tokens has no \"",
                   name, "\" with its ids, which the single template uses");
    for (const json& id : specials[name]["ids"]) {
      DENDRITE_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 &&
                         id.get<int64_t>() < (int64_t(1) << 31),
                     "open_tokenizer: ", w.file, ": key ", where.key, ".special_tokens.", name,
                     ".ids holds ", id.dump(), ", not an id");
      (seen_text ? ids.after : ids.before).push_back(id.get<int32_t>());
    }
  }
  return ids;
}

// ["<s>", 0]: the id of a RobertaProcessing / BertProcessing token.
int32_t pair_id(const json& j, const char* key, const JsonWhere& where) {
  const json& v = json_need(j, key, json::value_t::array, where);
  DENDRITE_CHECK(v.size() == 2 && v[1].is_number_integer() && v[1].get<int64_t>() >= 0 &&
                     v[1].get<int64_t>() < (int64_t(1) << 31),
                 "open_tokenizer: ", where.file, ": key ", where.at(key).key, " is ", v.dump(),
                 "; expected [token, id]");
  return v[1].get<int32_t>();
}

}  // namespace

SpecialIds read_post_processor(const json& j, const JsonWhere& where) {
  if (j.is_null()) return {};
  const std::string type = json_type(j, where);
  if (type == "ByteLevel") return {};
  if (type == "TemplateProcessing") return read_template(j, where);
  if (type == "RobertaProcessing" || type == "BertProcessing")
    return {{pair_id(j, "cls", where)}, {pair_id(j, "sep", where)}};
  if (type == "Sequence") {
    const json& list = json_need(j, "processors", json::value_t::array, where);
    SpecialIds all;
    for (size_t i = 0; i < list.size(); ++i) {
      const SpecialIds one = read_post_processor(list[i], where.at("processors").index(i));
      all.before.insert(all.before.begin(), one.before.begin(), one.before.end());
      all.after.insert(all.after.end(), one.after.begin(), one.after.end());
    }
    return all;
  }
  unsupported_kind(where, type,
                   "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence");
}

}  // namespace dendrite

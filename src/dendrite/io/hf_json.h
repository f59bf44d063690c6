// Reading the keys of a tokenizer.json with errors that name the file and the
// key's full path ("open_tokenizer: FILE: key pre_tokenizer.pattern ...").
// Where tells both; at() and the helpers below extend it as they descend.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "dendrite/core/check.h"
#include "dendrite/core/json_number.h"

namespace dendrite {

struct JsonWhere {
  std::string file;  // the tokenizer.json
  std::string key;   // the path of the value in it, e.g. "normalizer.normalizers[1]"
  JsonWhere at(const std::string& child) const {
    return {file, key.empty() ? child : key + "." + child};
  }
  JsonWhere index(size_t i) const { return {file, key + "[" + std::to_string(i) + "]"}; }
};

// j[key] as T, fallback when absent or null.
template <class T>
T json_get(const nlohmann::json& j, const char* key, const T& fallback, const JsonWhere& where) {
  if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) return fallback;
  const nlohmann::json& v = j.at(key);
  DENDRITE_CHECK(json_number_fits<T>(v), "open_tokenizer: ", where.file, ": key ",
                 where.at(key).key, " is ", v.dump(), ", expected ", json_number_kind<T>());
  try {
    return v.get<T>();
  } catch (const nlohmann::json::exception& e) {
    fail("open_tokenizer: ", where.file, ": key ", where.at(key).key, " has the wrong type (",
         e.what(), ")");
  }
}

// j[key], which must be present and of the given type.
inline const nlohmann::json& json_need(const nlohmann::json& j, const char* key,
                                       nlohmann::json::value_t type, const JsonWhere& where) {
  const std::string name = where.at(key).key;
  DENDRITE_CHECK(j.is_object() && j.contains(key), "open_tokenizer: ", where.file, ": key ", name,
                 " is missing; is it a complete tokenizer file?");
  const nlohmann::json& v = j.at(key);
  DENDRITE_CHECK(v.type() == type, "open_tokenizer: ", where.file, ": key ", name, " is a ",
                 v.type_name(), ", expected a ", nlohmann::json(type).type_name());
  return v;
}

// The "type" of a component object (normalizer, pre_tokenizer, ...).
inline std::string json_type(const nlohmann::json& j, const JsonWhere& where) {
  DENDRITE_CHECK(j.is_object(), "open_tokenizer: ", where.file, ": key ", where.key, " is ",
                 j.dump().substr(0, 200), ", expected an object with a \"type\"");
  return json_need(j, "type", nlohmann::json::value_t::string, where).get<std::string>();
}

// An error for a component kind this reader does not run.
[[noreturn]] inline void unsupported_kind(const JsonWhere& where, const std::string& type,
                                          const char* supported) {
  fail("open_tokenizer: ", where.file, ": key ", where.key, " has type \"", type,
       "\", which Dendrite does not run; supported: ", supported);
}

}  // namespace dendrite

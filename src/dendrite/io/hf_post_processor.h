// The post-processor of a tokenizer.json, for one text: the special token ids
// the library's encode(text, add_special_tokens=True) puts before and after
// the text's ids. TemplateProcessing (its "single" template), ByteLevel
// (none), RobertaProcessing and BertProcessing (cls before, sep after) and
// Sequence; any other kind is refused naming it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "dendrite/io/hf_json.h"
#include "dendrite/io/tokenizer.h"

namespace dendrite {

// The ids around a text (empty for JSON null).
SpecialIds read_post_processor(const nlohmann::json& j, const JsonWhere& where);

}  // namespace dendrite

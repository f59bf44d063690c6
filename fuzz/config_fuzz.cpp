// libFuzzer target: arbitrary bytes as the JSON of a model config and of the
// training options (`dendrite train --model FILE` and `--config FILE`). Bad
// input must end in a dendrite::Error or a nlohmann::json exception.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "dendrite/core/check.h"
#include "dendrite/model/config.h"
#include "dendrite/train/trainer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(data, data + size);
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  try {
    dendrite::ModelConfig c = dendrite::model_config_from_json(j);
    (void)dendrite::to_json(c);
    (void)c.num_parameters();
    (void)c.padded_vocab(2);
  } catch (const dendrite::Error&) {
  } catch (const nlohmann::json::exception&) {
  }
  try {
    dendrite::TrainOptions opt;
    opt.update_from_json(j);
    (void)opt.to_json().dump();
  } catch (const dendrite::Error&) {
  } catch (const nlohmann::json::exception&) {
  }
  return 0;
}

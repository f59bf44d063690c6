#include "dendrite/core/precision.h"

#include "dendrite/core/check.h"

namespace dendrite {

Precision parse_precision(const std::string& text) {
  if (text == "fp32") return Precision::kF32;
  if (text == "bf16") return Precision::kBF16;
  fail("precision: unknown precision '", text, "'; use fp32 or bf16");
}

}  // namespace dendrite

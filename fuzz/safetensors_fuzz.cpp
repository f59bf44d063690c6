// libFuzzer target: arbitrary bytes as a safetensors file. SafetensorsReader
// must either reject the file with a dendrite::Error or hand back tensors whose
// every byte can be read; anything else (a crash, a sanitizer report, another
// exception type) is a finding.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "dendrite/core/check.h"
#include "dendrite/io/safetensors.h"
#include "fuzz_file.h"

namespace {

// Reads every tensor: F32 ones through read_f32 with their own shape, all of
// them byte by byte (the CRC touches each byte, so ASan sees any bad range).
void read_all(const dendrite::SafetensorsReader& reader) {
  for (const std::string& name : reader.names()) {
    const dendrite::TensorInfo& t = reader.info(name);
    volatile uint32_t crc = dendrite::crc32c(t.data, t.bytes);
    (void)crc;
    if (t.dtype == "F32") {
      std::vector<float> out(t.bytes / sizeof(float));
      reader.read_f32(name, t.shape, out.data());
    }
  }
  for (const auto& [key, value] : reader.metadata()) (void)(key.size() + value.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = dendrite::fuzz::write_input(data, size, ".safetensors");
  try {
    dendrite::SafetensorsReader reader(path);
    read_all(reader);
  } catch (const dendrite::Error&) {
  } catch (const nlohmann::json::exception&) {
  }
  return 0;
}

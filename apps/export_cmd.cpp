// `dendrite export`: a checkpoint as a Hugging Face model folder (train/export.h).
#include <cstdio>

#include "apps/commands.h"
#include "dendrite/train/export.h"

namespace dendrite::app {

Runner add_export(CLI::App& app, MpiEnv& env) {
  auto checkpoint = std::make_shared<std::string>(), hf = std::make_shared<std::string>();
  app.add_option("--checkpoint", *checkpoint, "Run folder or checkpoint folder")->required();
  app.add_option("--hf", *hf, "The Hugging Face folder to write (must not exist)")->required();
  return [checkpoint, hf, &env] {
    if (env.rank() == 0) std::printf("%s\n", export_hf(*checkpoint, *hf).c_str());
    return 0;
  };
}

}  // namespace dendrite::app

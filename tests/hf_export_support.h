// The export of a Hugging Face reference folder that hf_test checks and that
// scripts/make_hf_reference.py hands to transformers (through hf_export,
// hf_export_main.cpp): the folder loaded into a model on one process, saved
// as a checkpoint and exported with `dendrite export`'s export_hf. No
// arithmetic touches the weights, so every machine writes the same bytes.
#pragma once

#include <string>

#include "backend_support.h"
#include "dendrite/comm/grid.h"
#include "dendrite/io/hf_folder.h"
#include "dendrite/model/transformer.h"
#include "dendrite/train/checkpoint.h"
#include "dendrite/train/export.h"

namespace dendrite::test {

struct HfExport {
  std::string checkpoint;  // run_dir/ckpt-00000001
  std::string folder;      // the export
};

// Exports the Hugging Face folder src through a checkpoint (step 1) written
// under run_dir, into out (which must not exist).
inline HfExport export_through_checkpoint(const std::string& src, const std::string& run_dir,
                                          const std::string& out) {
  const HfFolder folder(src);
  auto grid = ProcessGrid::single();
  Transformer model(folder.config(), *grid, cpu_backend(), 1, 8);
  load_hf_folder(folder, model);
  const CheckpointContents contents{{{"model", to_json(folder.config())}}, {{"step", 1}}, ""};
  HfExport e{save_checkpoint(run_dir, 1, model, nullptr, contents), out};
  export_hf(e.checkpoint, out);
  return e;
}

}  // namespace dendrite::test

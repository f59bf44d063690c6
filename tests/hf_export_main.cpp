// `hf_export SRC OUT`: writes to OUT the export of the Hugging Face folder
// SRC that hf_test makes (hf_export_support.h), for
// scripts/make_hf_reference.py to load in transformers. Tests only.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "hf_export_support.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s SRC OUT (a Hugging Face folder, a folder to write)\n", argv[0]);
    return 2;
  }
  const std::string out = argv[2], run_dir = out + ".run";
  try {
    dendrite::test::export_through_checkpoint(argv[1], run_dir, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_export: %s\n", e.what());
    return 1;
  }
  std::filesystem::remove_all(run_dir);
  return 0;
}

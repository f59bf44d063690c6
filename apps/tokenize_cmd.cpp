// `dendrite tokenize`: text files -> the tokenizer's files, train.bin, val.bin, meta.json.
#include "apps/commands.h"
#include "dendrite/io/tokenizer.h"
#include "dendrite/train/tokenize.h"

namespace dendrite::app {

Runner add_tokenize(CLI::App& app) {
  auto opt = std::make_shared<TokenizeOptions>();
  app.add_option("--input", opt->inputs, "Text files to tokenize")->required()->expected(1, -1);
  app.add_option("--out", opt->out_dir,
                 "Folder for the tokenizer's files, train.bin, val.bin, meta.json")
      ->required();
  app.add_option("--vocab-size", opt->vocab_size, "Vocabulary size of the BPE model to train")
      ->capture_default_str()
      ->check(CLI::Range(64, 1 << 20));
  app.add_option("--tokenizer", opt->model,
                 "Use this tokenizer instead of training one: a SentencePiece FILE.model "
                 "(Dendrite's, encoded line by line), or a Hugging Face tokenizer folder "
                 "(tokenizer.json: a BPE pipeline as Hugging Face tokenizers runs it, GPT-2, "
                 "Llama 3, Qwen2, Mistral or Llama 2 style; vocab.json + merges.txt: GPT-2 "
                 "style byte-level BPE; tokenizer.model: SentencePiece, encoded as that library "
                 "does); its files are copied into --out. Each input file is a document: the "
                 "BOS its post-processor (or add_bos_token) adds goes before each, its eos "
                 "between two; text that is not UTF-8 is read as Python's "
                 "decode(errors=\"replace\")");
  app.add_option("--val-fraction", opt->val_fraction,
                 "Fraction of the tokens kept for validation: the last ones, written to val.bin "
                 "(train --eval-every reads it)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--seed", opt->seed, "Seed of the tokenizer training and of the canary positions")
      ->capture_default_str();
  app.add_option("--canaries", opt->canaries,
                 "Text file of passages (separated by empty lines or lines holding only '%', as "
                 "in fortune files) to insert into train.bin (never val.bin) at seeded positions; "
                 "their locations go to canaries.json");
  app.add_option("--canary-repeat", opt->canary_repeat,
                 "Copies of each canary passage; a list (e.g. 1,2,4,8,16,32) gives passage i the "
                 "(i mod length)-th count, for dose experiments")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  return [opt] {
    run_tokenize(*opt);
    return 0;
  };
}

}  // namespace dendrite::app

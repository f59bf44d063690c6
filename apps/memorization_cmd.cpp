// `dendrite memorization`: how much of its training text a checkpoint
// reproduces verbatim (DESIGN.md section 7). Three sets of samples, each a
// prefix of p tokens and the s true tokens after it:
//   train     N samples at seeded offsets of the training token file
//   canaries  each distinct canary passage of canaries.json (all occurrences of
//             a passage hold the same tokens, so each is scored once)
//   control   held-out text: N samples of val.bin, or of a --control token
//             file, or every passage of a --control text file (canary format)
// Greedy decoding runs batched on any grid under mpirun; rank 0 prints a table
// or, with --json, one JSON object.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "dendrite/backend/backend.h"
#include "dendrite/core/check.h"
#include "dendrite/core/rng.h"
#include "dendrite/eval/memorization.h"
#include "dendrite/train/canaries.h"
#include "dendrite/train/checkpoint.h"
#include "dendrite/io/token_file.h"
#include "dendrite/io/tokenizer.h"

namespace dendrite::app {

namespace {

namespace fs = std::filesystem;

constexpr uint64_t kSampleStream = 0x6d656d6f72697a65ULL;  // "memorize"

struct MemorizationOptions {
  std::string checkpoint, data, canaries, control, grid, device = "auto";
  int prefix = 32, suffix = 32, samples = 100, batch = 16, threads = 0;
  uint64_t seed = 1234;
  bool json = false, no_cache = false;
};

// n samples at seeded offsets of a token file (fewer when it is short), none
// overlapping the spans to avoid (sample_starts).
std::vector<Sample> sample_tokens(const TokenFile& f, int n, int p, int s, uint64_t seed,
                                  std::vector<Span> avoid = {}) {
  std::vector<Sample> out;
  for (const uint64_t at :
       sample_starts(f.size(), uint64_t(p + s), n, seed, kSampleStream, std::move(avoid))) {
    Sample x{Ids(p), Ids(s)};
    f.copy(at, p, x.prefix.data());
    f.copy(at + p, s, x.suffix.data());
    out.push_back(std::move(x));
  }
  return out;
}

// One sample per distinct passage longer than p tokens; the suffix is its next
// min(s, length - p) tokens.
Sample passage_sample(const Ids& ids, int p, int s) {
  const size_t end = std::min(ids.size(), size_t(p + s));
  return {Ids(ids.begin(), ids.begin() + p), Ids(ids.begin() + p, ids.begin() + end)};
}

// One sample per distinct passage (of those with `copies` copies; 0: all).
std::vector<Sample> canary_samples(const CanaryFile& c, const TokenFile& train, int p, int s,
                                   int copies = 0) {
  std::vector<Sample> out;
  std::vector<bool> seen(c.texts.size(), false);
  const std::vector<int> n = c.copies();
  for (const CanaryOccurrence& o : c.where) {
    if (seen[o.index] || o.length <= p || (copies > 0 && n[o.index] != copies)) continue;
    seen[o.index] = true;
    Ids ids(o.length);
    train.copy(o.offset, o.length, ids.data());
    out.push_back(passage_sample(ids, p, s));
  }
  return out;
}

bool is_token_file(const std::string& path) {
  char magic[8] = {};
  std::ifstream(path, std::ios::binary).read(magic, 8);
  return std::string(magic, 8) == "DNDRTOKS";
}

struct SampleSets {
  std::vector<std::pair<SetScores, std::vector<Sample>>> sets;  // scores filled later
  std::string control_source;
};

SampleSets gather_samples(const MemorizationOptions& o, const std::string& ckpt_dir) {
  const fs::path data = o.data;
  const fs::path folder = fs::is_directory(data) ? data : data.parent_path();
  const std::string train_path = fs::is_directory(data) ? (data / "train.bin").string() : o.data;
  TokenFile train(train_path);
  SampleSets out;
  auto add = [&](const std::string& name, const char* unit, std::vector<Sample> v) {
    out.sets.push_back({SetScores{name, unit, 0, {}, {}, {}}, std::move(v)});
  };
  std::string canaries = o.canaries;
  if (canaries.empty() && fs::exists(folder / "canaries.json")) canaries = (folder / "canaries.json").string();
  if (canaries.empty()) {
    add("train", "sample", sample_tokens(train, o.samples, o.prefix, o.suffix, o.seed));
  } else {
    // The training text itself: windows that touch no canary copy.
    const CanaryFile c = read_canaries_json(canaries);
    std::vector<Span> copies;
    for (const CanaryOccurrence& w : c.where) copies.push_back({w.offset, w.offset + uint64_t(w.length)});
    add("train", "non-canary sample",
        sample_tokens(train, o.samples, o.prefix, o.suffix, o.seed, std::move(copies)));
    add("canaries", "distinct canary", canary_samples(c, train, o.prefix, o.suffix));
    // Passages inserted different numbers of times (tokenize --canary-repeat
    // 1,2,4,...): each count on its own too, "canaries x4".
    std::vector<int> counts = c.copies();
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    if (counts.size() > 1)
      for (int n : counts)
        add(str("canaries x", n), "distinct canary", canary_samples(c, train, o.prefix, o.suffix, n));
  }
  if (!o.control.empty() && !is_token_file(o.control)) {
    const std::unique_ptr<TextTokenizer> tok = open_tokenizer(checkpoint_tokenizer(ckpt_dir));
    std::ifstream in(o.control);
    DENDRITE_CHECK(in.good(), "memorization: cannot open --control ", o.control);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<Sample> v;
    for (const std::string& passage : split_passages(text)) {
      Ids ids = tok->encode(passage);
      if (int(ids.size()) > o.prefix) v.push_back(passage_sample(ids, o.prefix, o.suffix));
    }
    out.control_source = o.control + " (text passages)";
    add("control", "passage", std::move(v));
  } else {
    const std::string path = o.control.empty() ? (folder / "val.bin").string() : o.control;
    if (fs::exists(path)) {
      TokenFile f(path);
      out.control_source = path;
      add("control", "sample", sample_tokens(f, o.samples, o.prefix, o.suffix, o.seed + 1));
    }
  }
  return out;
}

nlohmann::json interval_json(const Interval& i) { return {{"value", i.value}, {"lo", i.lo}, {"hi", i.hi}}; }

void print_table(const MemorizationOptions& o, const std::string& ckpt, const SampleSets& s) {
  std::printf("memorization of %s: greedy, prefix %d, suffix %d tokens; 95%% intervals\n",
              ckpt.c_str(), o.prefix, o.suffix);
  std::printf("%-12s %-18s %5s  %-22s %-22s %-22s\n", "set", "unit", "n", "exact match",
              "token match", "ROUGE-L");
  auto cell = [](const Interval& i) {
    char b[64];
    std::snprintf(b, sizeof b, "%.3f [%.3f, %.3f]", i.value, i.lo, i.hi);
    return std::string(b);
  };
  for (const auto& [sc, samples] : s.sets)
    std::printf("%-12s %-18s %5lld  %-22s %-22s %-22s\n", sc.name.c_str(), sc.unit.c_str(),
                static_cast<long long>(sc.n), cell(sc.exact).c_str(), cell(sc.token).c_str(),
                cell(sc.rouge).c_str());
  if (!s.control_source.empty()) std::printf("control: %s\n", s.control_source.c_str());
}

int run_memorization(const MemorizationOptions& o, MpiEnv& env) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  std::unique_ptr<Backend> backend = make_rank_backend(o.device, env);
  ProcessGrid grid = make_grid(backend->transport(env.world()), o.grid);
  const std::string dir = resolve_checkpoint(o.checkpoint);
  ModelConfig mc = model_config_from_json(read_checkpoint_config(dir).at("model"));
  DENDRITE_CHECK(o.prefix >= 1 && o.suffix >= 1 && o.samples >= 0, "memorization: --prefix and ",
                 "--suffix must be positive and --samples non-negative");
  DENDRITE_CHECK(o.prefix + o.suffix - 1 <= mc.block_size, "memorization: --prefix ", o.prefix,
                 " + --suffix ", o.suffix, " - 1 exceeds the model's block size ", mc.block_size,
                 "; use a shorter prefix or suffix");
  const int dz = grid.shape().d * grid.shape().z;
  DENDRITE_CHECK(o.batch % dz == 0, "memorization: --batch ", o.batch, " is not divisible by d*z = ",
                 dz, " of grid ", grid.shape().str(), "; pick a multiple");
  SampleSets sets = gather_samples(o, dir);
  Transformer model(mc, grid, *backend, o.batch, o.prefix + o.suffix - 1);
  load_weights(dir, model);
  // A prompt met again (the canaries by copy count repeat the canaries) is
  // decoded once: the same continuation in every set.
  std::map<Ids, Ids> decoded;
  for (auto& [sc, samples] : sets.sets) {
    std::vector<Ids> prompts;
    for (const Sample& x : samples)
      if (!decoded.count(x.prefix)) prompts.push_back(x.prefix);
    std::sort(prompts.begin(), prompts.end());
    prompts.erase(std::unique(prompts.begin(), prompts.end()), prompts.end());
    std::vector<Ids> got = greedy_continuations(model, prompts, o.suffix, o.batch, !o.no_cache);
    for (size_t i = 0; i < prompts.size(); ++i) decoded[prompts[i]] = std::move(got[i]);
    std::vector<Ids> continuations;
    for (const Sample& x : samples) continuations.push_back(decoded.at(x.prefix));
    sc = score_set(sc.name, sc.unit, samples, continuations);
  }
  if (grid.rank() != 0) return 0;
  if (!o.json) {
    print_table(o, dir, sets);
    return 0;
  }
  nlohmann::json j = {{"checkpoint", dir}, {"prefix", o.prefix}, {"suffix", o.suffix},
                      {"samples", o.samples}, {"seed", o.seed}, {"grid", grid.shape().str()},
                      {"control_source", sets.control_source}};
  for (const auto& [sc, samples] : sets.sets)
    j[sc.name] = {{"unit", sc.unit}, {"n", sc.n}, {"exact_match", interval_json(sc.exact)},
                  {"token_match", interval_json(sc.token)}, {"rouge_l", interval_json(sc.rouge)}};
  std::printf("%s\n", j.dump(1).c_str());
  return 0;
}

}  // namespace

Runner add_memorization(CLI::App& app, MpiEnv& env) {
  auto o = std::make_shared<MemorizationOptions>();
  app.add_option("--checkpoint", o->checkpoint, "Run folder or checkpoint folder")->required();
  app.add_option("--data", o->data,
                 "Training data: the folder of `dendrite tokenize` or its train.bin (val.bin and "
                 "canaries.json beside it are used when present)")
      ->required();
  app.add_option("--canaries", o->canaries, "canaries.json (default: the one beside the data)");
  app.add_option("--control", o->control,
                 "Held-out text: a token file (N seeded samples) or a text file (each passage, "
                 "separated as in canary files); default: val.bin beside the data");
  app.add_option("--prefix", o->prefix, "Prompt tokens p")->capture_default_str();
  app.add_option("--suffix", o->suffix, "Tokens s decoded greedily and compared")->capture_default_str();
  app.add_option("--samples", o->samples, "Samples N of the training (and token control) data")
      ->capture_default_str();
  app.add_option("--seed", o->seed, "Seed of the sample offsets")->capture_default_str();
  app.add_option("--batch", o->batch, "Sequences decoded together (divisible by d*z of the grid)")
      ->capture_default_str();
  app.add_option("--grid", o->grid, "Process grid, e.g. x=2,y=2 (default: all ranks data-parallel)");
  app.add_option("--threads", o->threads, "Threads per rank (default: OMP_NUM_THREADS or all cores)");
  app.add_option("--device", o->device, "cpu, cuda or auto (as train)")->capture_default_str();
  app.add_flag("--json", o->json, "Print one JSON object instead of the table");
  app.add_flag("--no-cache", o->no_cache,
               "Run each decoded token over the whole sequence instead of the key/value cache "
               "(slower; the same tokens)");
  return [o, &env] { return run_memorization(*o, env); };
}

}  // namespace dendrite::app

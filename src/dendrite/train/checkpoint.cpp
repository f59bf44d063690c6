#include "dendrite/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "dendrite/core/check.h"
#include "dendrite/model/hf_names.h"
#include "dendrite/io/safetensors.h"

namespace dendrite {

namespace fs = std::filesystem;

namespace {

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Writes text to path atomically.
void write_text(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    DENDRITE_CHECK(out.good(), "checkpoint: cannot write ", tmp, " (disk full or no permission)");
  }
  fsync_path(tmp);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp);
    fail("checkpoint: cannot rename ", tmp, " to ", path, ": ", ec.message());
  }
}

// The Hugging Face tensors of flat buffers (laid out like the model's
// parameters, this rank's shards), each named prefix + its name, gathered to
// rank 0 in pieces: every rank takes part in each gather, and no rank holds
// more than one piece. A piece is a block of rows of about piece_floats (a
// large tensor, such as a 128k-token embedding, in many pieces), or a whole
// tensor that must be rearranged (transposed: GPT-2's Conv1D weights).
class TensorGathers {
 public:
  TensorGathers(Transformer& model, std::vector<std::pair<std::string, const float*>> flats,
                int64_t piece_floats)
      : model_(model),
        flats_(std::move(flats)),
        piece_floats_(piece_floats),
        tensors_(hf_tensors(model.config(), model.table())) {
    for (const HfTensor& t : tensors_) pieces_.push_back(pieces_of(t));
  }
  size_t count() const { return flats_.size() * tensors_.size(); }
  // Declares the tensors (rank 0's writer).
  void declare(SafetensorsWriter& writer) const {
    for (const auto& [prefix, flat] : flats_)
      for (const HfTensor& t : tensors_) writer.add_deferred(prefix + t.name, "F32", t.shape());
  }
  // The pieces of tensor i (in declare()'s order), in the order of its bytes.
  size_t pieces(size_t i) const { return pieces_[i % tensors_.size()].size(); }
  // Gathers piece k of tensor i; rank 0's holds its bytes (others' is empty).
  SafetensorsWriter::Piece gather(size_t i, size_t k) {
    const HfTensor& t = tensors_[i % tensors_.size()];
    const float* flat = flats_[i / tensors_.size()].second;
    const Piece& piece = pieces_[i % tensors_.size()][k];
    const bool root = model_.grid().world().rank() == 0;
    if (piece.part < 0) {  // the whole tensor, rearranged
      GlobalTensors parts;
      for (const std::string& p : t.parts) {
        const ParamSpec& s = model_.table().find(p);
        auto& g = parts[p];
        if (root) g.resize(size_t(s.global_rows() * s.global_cols()));
        gather_rows(s, flat, 0, s.global_rows(), root ? g.data() : nullptr);
      }
      if (!root) return {};
      rows_.resize(size_t(t.numel()));
      export_hf_tensor(t, model_.table(), parts, rows_.data());
      return {rows_.data(), rows_.size() * sizeof(float)};
    }
    const ParamSpec& s = model_.table().find(t.parts[size_t(piece.part)]);
    if (root) rows_.resize(size_t((piece.row1 - piece.row0) * s.global_cols()));
    gather_rows(s, flat, piece.row0, piece.row1, root ? rows_.data() : nullptr);
    if (!root) return {};
    return {rows_.data(), rows_.size() * sizeof(float)};
  }
  // Rank 0's source for write_streamed: each tensor's pieces in turn (the
  // writer asks for them in the order of their bytes).
  SafetensorsWriter::TensorSource source() {
    return [this](size_t i, size_t offset) {
      next_ = offset == 0 ? 0 : next_ + 1;
      DENDRITE_CHECK(next_ < pieces(i), "checkpoint: tensor ", i, " has ", pieces(i),
                     " pieces, and its file asked for more");
      return gather(i, next_);
    };
  }

 private:
  struct Piece {
    int part = -1;  // index in the tensor's parts; -1: the whole tensor, rearranged
    int64_t row0 = 0, row1 = 0;
  };
  // Row blocks of each part in turn, cropped to the tensor's rows (a padded
  // vocabulary's extra rows are not written), where the tensor is its parts'
  // rows one after another; else the whole tensor as one piece.
  std::vector<Piece> pieces_of(const HfTensor& t) const {
    if (t.transpose) return {Piece{}};
    std::vector<Piece> out;
    int64_t row = 0;  // the part's first row in the tensor
    for (size_t p = 0; p < t.parts.size(); ++p) {
      const ParamSpec& s = model_.table().find(t.parts[p]);
      const int64_t rows = std::clamp<int64_t>(t.rows - row, 0, s.global_rows());
      const int64_t block = std::max<int64_t>(1, piece_floats_ / s.global_cols());
      for (int64_t r = 0; r < rows; r += block)
        out.push_back({int(p), r, std::min(rows, r + block)});
      row += s.global_rows();
    }
    return out;
  }
  void gather_rows(const ParamSpec& s, const float* flat, int64_t row0, int64_t row1, float* out) {
    Backend& backend = model_.backend();
    gather_rows_to_root(
        model_.grid(), s, row0, row1,
        [&](int64_t first, int64_t n, float* dst) {
          backend.download(dst, flat + s.offset + first, size_t(n) * sizeof(float));
        },
        out);
  }

  Transformer& model_;
  std::vector<std::pair<std::string, const float*>> flats_;
  int64_t piece_floats_;
  std::vector<HfTensor> tensors_;
  std::vector<std::vector<Piece>> pieces_;  // of each tensor
  std::vector<float> rows_;                 // rank 0: the piece last gathered
  size_t next_ = 0;                         // rank 0: the piece the file asked for last
};

// The Hugging Face tensors of the model (names as hf_names.h gives them) into
// the flat buffer `flat` (laid out like the model's parameters, in its
// backend's memory). Each rank reads only the elements of its own chunks:
// gather(name, shape, idx, n, out) reads the elements at flat indices idx of
// the tensor, after checking its shape; the chunks are filled on the host and
// uploaded. Rows past the tensor's (a padded vocabulary) are zeros.
template <class Gather>
void read_hf_tensors(Transformer& model, float* flat, Gather&& gather) {
  const ParamTable& table = model.table();
  std::vector<int64_t> idx, at;
  std::vector<float> values, chunk;
  for (const HfTensor& t : hf_tensors(model.config(), table)) {
    int64_t row0 = 0;  // the part's first row in the concatenation of the parts
    for (const std::string& p : t.parts) {
      const ParamSpec& s = table.find(p);
      const int64_t cols = s.global_cols();
      idx.clear(), at.clear();
      for (int64_t i = 0; i < s.numel; ++i) {
        const int64_t g = s.global_index(i), row = row0 + g / cols, col = g % cols;
        if (row >= t.rows) continue;
        idx.push_back(t.transpose ? col * t.rows + row : row * t.cols + col);
        at.push_back(i);
      }
      values.resize(idx.size());
      gather(t.name, t.shape(), idx.data(), int64_t(idx.size()), values.data());
      chunk.assign(size_t(s.numel), 0.0f);
      for (size_t k = 0; k < at.size(); ++k) chunk[size_t(at[k])] = values[k];
      model.backend().upload(flat + s.offset, chunk.data(), chunk.size() * sizeof(float));
      row0 += s.global_rows();
    }
  }
}

// Reads the tensors named prefix + name into `flat` (read_hf_tensors).
void read_tensors(const SafetensorsReader& reader, Transformer& model, float* flat,
                  const std::string& prefix) {
  read_hf_tensors(model, flat, [&](const std::string& hf, const std::vector<int64_t>& shape,
                                   const int64_t* idx, int64_t n, float* out) {
    const std::string name = prefix + hf;
    DENDRITE_CHECK(reader.has(name), "checkpoint ", reader.path(), ": tensor '", name,
                   "' is missing; the file holds another model (this run's is ",
                   arch_name(model.config().arch), ")");
    reader.gather_float(name, shape, idx, n, out);
  });
}

bool is_checkpoint_name(const std::string& n) {
  return n.size() == 13 && n.rfind("ckpt-", 0) == 0 &&
         std::all_of(n.begin() + 5, n.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Temporary folders (.ckpt-<step>.tmp) of saves that a crash or kill cut
// short: never a checkpoint (resume goes through `latest` or a folder holding
// model.safetensors), removed here before the next save.
void remove_stale_temporaries(const fs::path& run_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() == 18 && n[0] == '.' && is_checkpoint_name(n.substr(1, 13)) &&
        n.substr(14) == ".tmp")
      fs::remove_all(e.path(), ec);
  }
}

// The other ranks wait for rank 0's write without the collective watchdog: a
// large checkpoint on a slow disk may take longer than --timeout, and an abort
// then would lose it.
void wait_for_writer(Communicator& world) {
  const double timeout = world.timeout();
  world.set_timeout(0);
  world.barrier();
  world.set_timeout(timeout);
}

}  // namespace

std::vector<std::string> prune_checkpoints(const std::string& run_dir, int keep) {
  std::vector<std::string> lines;
  if (keep <= 0) return lines;
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir, ec))
    if (e.is_directory() && is_checkpoint_name(e.path().filename().string()))
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());  // 8-digit steps: oldest first
  std::string latest;
  std::ifstream(fs::path(run_dir) / "latest") >> latest;
  for (size_t i = 0; i + keep < names.size(); ++i) {
    if (names[i] == latest) continue;
    fs::remove_all(fs::path(run_dir) / names[i], ec);
    lines.push_back(ec ? str("warning: could not remove old checkpoint ", names[i], " (--keep ",
                             keep, "): ", ec.message())
                       : str("removed old checkpoint ", names[i], " (--keep ", keep, ")"));
  }
  return lines;
}

std::string save_checkpoint(const std::string& run_dir, int64_t step, Transformer& model,
                            const AdamW* optimizer, const CheckpointContents& contents,
                            const TrainHooks* hooks) {
  char name[32];
  std::snprintf(name, sizeof name, "ckpt-%08lld", static_cast<long long>(step));
  const fs::path final_dir = fs::path(run_dir) / name;
  // Every rank takes part in gathering each tensor; rank 0 writes it.
  TensorGathers weights(model, {{"", std::as_const(model).params()}}, contents.piece_floats);
  TensorGathers state(
      model,
      optimizer ? std::vector<std::pair<std::string, const float*>>{{"exp_avg.", optimizer->m()},
                                                                    {"exp_avg_sq.", optimizer->v()}}
                : std::vector<std::pair<std::string, const float*>>{},
      contents.piece_floats);
  if (model.grid().rank() != 0) {
    for (TensorGathers* g : {&weights, &state})
      for (size_t i = 0; i < g->count(); ++i)
        for (size_t k = 0; k < g->pieces(i); ++k) g->gather(i, k);
    wait_for_writer(model.grid().world());  // returns once rank 0 has written
    return final_dir.string();
  }
  const fs::path tmp_dir = fs::path(run_dir) / (std::string(".") + name + ".tmp");
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  DENDRITE_CHECK(!ec, "checkpoint: cannot create ", run_dir, ": ", ec.message());
  remove_stale_temporaries(run_dir);
  fs::create_directories(tmp_dir, ec);
  DENDRITE_CHECK(!ec, "checkpoint: cannot create ", tmp_dir.string(), ": ", ec.message());
  try {
    SafetensorsWriter weights_file, state_file;
    weights.declare(weights_file);
    weights_file.set_metadata("format", "pt");
    weights_file.set_metadata("dendrite.arch", arch_name(model.config().arch));
    weights_file.write_streamed((tmp_dir / "model.safetensors").string(), weights.source());
    if (optimizer) {
      state.declare(state_file);
      state_file.write_streamed((tmp_dir / "optimizer.safetensors").string(), state.source());
    }
    if (hooks) hooks->checkpoint_tensors_written(step, tmp_dir.string());
    write_text((tmp_dir / "trainer_state.json").string(), contents.trainer_state.dump(2) + "\n");
    write_text((tmp_dir / "config.json").string(), contents.config.dump(2) + "\n");
    if (!contents.tokenizer_path.empty() && fs::exists(contents.tokenizer_path))
      fs::copy_file(contents.tokenizer_path, tmp_dir / "tokenizer.model");
    for (const std::string& f : contents.tokenizer_files)
      fs::copy_file(f, tmp_dir / fs::path(f).filename());
    if (!contents.tokenizer_format.empty())
      write_text((tmp_dir / "tokenizer_meta.json").string(),
                 nlohmann::json{{"tokenizer_format", contents.tokenizer_format}}.dump(2) + "\n");
    fsync_path(tmp_dir.string());
    // Replace an older folder of the same step (a re-run) only once the new one is complete.
    const fs::path old_dir = fs::path(run_dir) / (std::string(".") + name + ".old");
    fs::remove_all(old_dir, ec);
    if (fs::exists(final_dir)) fs::rename(final_dir, old_dir);
    fs::rename(tmp_dir, final_dir);
    fs::remove_all(old_dir, ec);
    fsync_path(run_dir);
    write_text((fs::path(run_dir) / "latest").string(), std::string(name) + "\n");
  } catch (const std::exception& e) {
    fs::remove_all(tmp_dir, ec);
    fail("checkpoint: could not write checkpoint ", name, " (step ", step, ") in ", run_dir,
         " (disk full, over a quota or file-size limit, or no permission?); earlier checkpoints ",
         "and `latest` are intact: ", e.what());
  }
  wait_for_writer(model.grid().world());
  return final_dir.string();
}

std::string resolve_checkpoint(const std::string& path) {
  DENDRITE_CHECK(fs::exists(path), "checkpoint: ", path, " does not exist; pass a run folder (--out ",
                 "of an earlier run) or one of its ckpt-* folders");
  if (fs::exists(fs::path(path) / "model.safetensors")) return path;
  const fs::path latest = fs::path(path) / "latest";
  DENDRITE_CHECK(fs::exists(latest), "checkpoint: ", path, " holds no checkpoint (no model.safetensors ",
                 "and no 'latest' file)");
  std::ifstream in(latest);
  std::string name;
  in >> name;
  const fs::path dir = fs::path(path) / name;
  DENDRITE_CHECK(fs::exists(dir / "model.safetensors"), "checkpoint: ", latest.string(), " names ",
                 name, ", which holds no model.safetensors");
  return dir.string();
}

static nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  DENDRITE_CHECK(in.good(), "checkpoint: cannot read ", p.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint: ", p.string(), " is not valid JSON (", e.what(), ")");
  }
}

nlohmann::json read_checkpoint_config(const std::string& ckpt_dir) {
  return read_json(fs::path(ckpt_dir) / "config.json");
}

nlohmann::json read_trainer_state(const std::string& ckpt_dir) {
  return read_json(fs::path(ckpt_dir) / "trainer_state.json");
}

void load_weights_file(const std::string& path, Transformer& model, const std::string& prefix) {
  SafetensorsReader reader(path);
  read_tensors(reader, model, model.params(), prefix);
}

void load_weights(const std::string& ckpt_dir, Transformer& model) {
  load_weights_file((fs::path(ckpt_dir) / "model.safetensors").string(), model);
}

void load_optimizer(const std::string& ckpt_dir, Transformer& model, AdamW& optimizer) {
  SafetensorsReader reader((fs::path(ckpt_dir) / "optimizer.safetensors").string());
  read_tensors(reader, model, optimizer.m(), "exp_avg.");
  read_tensors(reader, model, optimizer.v(), "exp_avg_sq.");
}

void load_hf_folder(const HfFolder& folder, Transformer& model) {
  nlohmann::json mine = to_json(model.config()), theirs = to_json(folder.config());
  for (const char* key : {"init_std"}) mine.erase(key), theirs.erase(key);
  DENDRITE_CHECK(mine == theirs, "init-from: the model of ", folder.dir(), " is ", theirs.dump(),
                 " but the model built is ", mine.dump());
  read_hf_tensors(model, model.params(),
                  [&](const std::string& name, const std::vector<int64_t>& shape,
                      const int64_t* idx, int64_t n, float* out) {
                    folder.gather(name, shape, idx, n, out);
                  });
}

}  // namespace dendrite

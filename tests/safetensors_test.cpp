// Tests of the safetensors reader and writer: CRC-32C against its check value
// and a bitwise reference, round trips of every dtype the writer is used with,
// the on-disk layout parsed independently, and that every kind of corrupt file
// and every write failure is reported naming the file (and tensor).
// No dimension letters: tensors here are small literal arrays.
#include "dendrite/io/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <random>

#include "dendrite/core/check.h"

namespace dendrite {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file in safetensors layout with a hand-written header, for corrupt cases.
std::string raw_file(const std::string& header, const std::string& data) {
  const uint64_t n = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

// Bit-at-a-time CRC-32C, the definition the fast version must match.
uint32_t crc32c_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

// The message of the dendrite::Error that fn throws; fails the test if none.
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a dendrite::Error";
  return "";
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dendrite_st_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file(const std::string& name) const { return dir_ + "/" + name; }

  // Any *.tmp.* left in the folder means a writer did not clean up.
  std::vector<std::string> leftover_temporaries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename().string().find(".tmp.") != std::string::npos) {
        out.push_back(e.path().string());
      }
    }
    return out;
  }

  // Writes a small two-tensor file: "a" F32 [2, 3] and "b" I32 [4].
  std::string write_small(const std::string& name) {
    SafetensorsWriter w;
    w.add_f32("a", {2, 3}, a_.data());
    w.add("b", "I32", {4}, b_.data(), b_.size() * sizeof(int32_t));
    const std::string path = file(name);
    w.write(path);
    return path;
  }

  std::string dir_;
  std::vector<float> a_ = {1.5f, -2.f, 3.25f, 0.f, 1e-30f, -7.f};
  std::vector<int32_t> b_ = {1, -2, 300000, -2147483647};
};

TEST(Crc32c, CheckValueAndReference) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(300);
  for (auto& x : buf) x = static_cast<uint8_t>(rng());
  // Every length 0..64 at every alignment 0..7, and a longer buffer.
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; n <= 64; ++n) {
      ASSERT_EQ(crc32c(buf.data() + offset, n), crc32c_bitwise(buf.data() + offset, n))
          << "offset " << offset << " length " << n;
    }
  }
  EXPECT_EQ(crc32c(buf.data(), buf.size()), crc32c_bitwise(buf.data(), buf.size()));
  // Chaining: the crc of a whole equals the crc of its parts fed in turn.
  EXPECT_EQ(crc32c(buf.data() + 101, 199, crc32c(buf.data(), 101)), crc32c(buf.data(), buf.size()));
}

TEST_F(SafetensorsTest, RoundTripOfSeveralDtypes) {
  const std::vector<uint8_t> u8 = {0, 1, 127, 128, 255};
  const std::vector<int64_t> i64 = {INT64_MIN, -1, INT64_MAX};
  const float scalar = 42.5f;
  SafetensorsWriter w;
  w.add_f32("w.weight", {2, 3}, a_.data());
  w.add("ids", "I32", {2, 2}, b_.data(), b_.size() * sizeof(int32_t));
  w.add("bytes", "U8", {5}, u8.data(), u8.size());
  w.add("big", "I64", {3}, i64.data(), i64.size() * sizeof(int64_t));
  w.add_f32("scalar", {}, &scalar);
  w.add_f32("empty", {0, 3}, nullptr);
  const std::string path = file("model.safetensors");
  w.write(path);
  EXPECT_TRUE(leftover_temporaries().empty());

  SafetensorsReader r(path);
  EXPECT_EQ(r.path(), path);
  EXPECT_EQ(r.names(),
            (std::vector<std::string>{"big", "bytes", "empty", "ids", "scalar", "w.weight"}));
  std::vector<float> got(6, -1.f);
  r.read_f32("w.weight", {2, 3}, got.data());
  EXPECT_EQ(got, a_);
  float s = 0.f;
  r.read_f32("scalar", {}, &s);
  EXPECT_EQ(s, scalar);
  EXPECT_EQ(r.info("scalar").shape, std::vector<int64_t>{});
  EXPECT_EQ(r.info("scalar").bytes, 4u);
  r.read_f32("empty", {0, 3}, nullptr);
  EXPECT_EQ(r.info("empty").bytes, 0u);
  EXPECT_EQ(r.info("empty").shape, (std::vector<int64_t>{0, 3}));

  const TensorInfo& ids = r.info("ids");
  EXPECT_EQ(ids.dtype, "I32");
  EXPECT_EQ(ids.shape, (std::vector<int64_t>{2, 2}));
  ASSERT_EQ(ids.bytes, 16u);
  std::vector<int32_t> ids_got(4);
  std::memcpy(ids_got.data(), ids.data, 16);
  EXPECT_EQ(ids_got, b_);
  const TensorInfo& bytes = r.info("bytes");
  EXPECT_EQ(bytes.dtype, "U8");
  EXPECT_EQ(std::vector<uint8_t>(bytes.data, bytes.data + bytes.bytes), u8);
  const TensorInfo& big = r.info("big");
  EXPECT_EQ(big.dtype, "I64");
  std::vector<int64_t> big_got(3);
  std::memcpy(big_got.data(), big.data, 24);
  EXPECT_EQ(big_got, i64);
  EXPECT_TRUE(r.has("ids"));
  EXPECT_FALSE(r.has("nope"));
}

// Deferred tensors are asked for one at a time, in order, as the file
// reaches them; the file equals the one written from whole buffers, its
// checksums included.
TEST_F(SafetensorsTest, StreamedWriteEqualsTheWholeWrite) {
  const std::string whole = file("whole.safetensors"), streamed = file("streamed.safetensors");
  SafetensorsWriter w;
  w.add_f32("a", {2, 3}, a_.data());
  w.add("b", "I32", {4}, b_.data(), b_.size() * sizeof(int32_t));
  w.set_metadata("format", "pt");
  w.write(whole);
  SafetensorsWriter s;
  s.add_deferred("a", "F32", {2, 3});
  s.add_deferred("b", "I32", {4});
  s.set_metadata("format", "pt");
  // Tensor a in pieces of 10 bytes (the last 4), b whole.
  std::vector<std::pair<size_t, size_t>> asked;
  std::vector<uint8_t> held;  // one piece at a time, overwritten by the next
  s.write_streamed(streamed, [&](size_t i, size_t offset) {
    asked.emplace_back(i, offset);
    const auto* p = reinterpret_cast<const uint8_t*>(i == 0 ? static_cast<const void*>(a_.data())
                                                            : static_cast<const void*>(b_.data()));
    const size_t bytes = i == 0 ? a_.size() * sizeof(float) : b_.size() * sizeof(int32_t);
    const size_t n = i == 0 ? std::min<size_t>(10, bytes - offset) : bytes - offset;
    held.assign(p + offset, p + offset + n);
    return SafetensorsWriter::Piece{held.data(), n};
  });
  EXPECT_EQ(asked, (std::vector<std::pair<size_t, size_t>>{{0, 0}, {0, 10}, {0, 20}, {1, 0}}));
  EXPECT_EQ(read_bytes(streamed), read_bytes(whole));
  SafetensorsReader r(streamed);  // verifies every checksum
  EXPECT_EQ(r.names().size(), 2u);
  SafetensorsWriter missing;
  missing.add_deferred("a", "F32", {2, 3});
  EXPECT_THROW(missing.write(file("missing.safetensors")), Error);
  // A source that gives more bytes than the tensor has left is refused, and no file is left.
  const std::string over = file("over.safetensors");
  EXPECT_THROW(missing.write_streamed(over,
                                      [&](size_t, size_t) {
                                        return SafetensorsWriter::Piece{a_.data(), 100};
                                      }),
               Error);
  EXPECT_FALSE(std::filesystem::exists(over));
}

TEST_F(SafetensorsTest, MetadataRoundTrip) {
  SafetensorsWriter w;
  w.add_f32("a", {2, 3}, a_.data());
  w.set_metadata("config", R"({"n_layer": 12, "name": "gpt2"})");
  w.set_metadata("step", "1200");
  w.set_metadata("note", "gr\u00fc\u00dfe \"quoted\"\n");
  w.set_metadata("step", "1300");  // the last value set wins
  const std::string path = file("m.safetensors");
  w.write(path);
  SafetensorsReader r(path);
  const auto& m = r.metadata();
  EXPECT_EQ(m.at("config"), R"({"n_layer": 12, "name": "gpt2"})");
  EXPECT_EQ(m.at("step"), "1300");
  EXPECT_EQ(m.at("note"), "gr\u00fc\u00dfe \"quoted\"\n");
  EXPECT_EQ(m.at("checksum.a"), str(std::hex, std::setw(8), std::setfill('0'),
                                    crc32c(a_.data(), a_.size() * sizeof(float))));
  EXPECT_EQ(m.size(), 4u);
  // The checksum keys belong to the writer.
  EXPECT_THAT(error_of([&] { w.set_metadata("checksum.a", "00000000"); }), HasSubstr("reserved"));
}

// The layout, parsed here without the reader: size prefix, padded JSON,
// tensors contiguous in the order added, checksums of 8 lowercase hex digits.
TEST_F(SafetensorsTest, HeaderIsPlainSafetensors) {
  const std::vector<uint8_t> u8 = {9, 8, 7};
  const float scalar = 3.f;
  SafetensorsWriter w;
  w.add("z_first", "U8", {3}, u8.data(), 3);
  w.add_f32("a", {2, 3}, a_.data());
  w.add_f32("empty", {0}, nullptr);
  w.add_f32("s", {}, &scalar);
  w.add("b", "I32", {4}, b_.data(), 16);
  const std::string path = file("h.safetensors");
  w.write(path);

  const std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_LE(8 + n, bytes.size());
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  const std::vector<std::string> order = {"z_first", "a", "empty", "s", "b"};
  const std::vector<uint64_t> sizes = {3, 24, 0, 4, 16};
  const std::string data = bytes.substr(8 + n);
  uint64_t offset = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& t = header.at(order[i]);
    EXPECT_EQ(t.at("data_offsets")[0].get<uint64_t>(), offset) << order[i];
    offset += sizes[i];
    EXPECT_EQ(t.at("data_offsets")[1].get<uint64_t>(), offset) << order[i];
    const std::string want = header.at("__metadata__").at("checksum." + order[i]);
    const uint32_t crc = crc32c(data.data() + t.at("data_offsets")[0].get<uint64_t>(), sizes[i]);
    EXPECT_EQ(want, str(std::hex, std::setw(8), std::setfill('0'), crc)) << order[i];
  }
  EXPECT_EQ(offset, data.size());  // no gaps, nothing after the last tensor
  EXPECT_EQ(header.at("a").at("dtype"), "F32");
  EXPECT_EQ(header.at("a").at("shape"), nlohmann::json::array({2, 3}));
  EXPECT_EQ(header.at("s").at("shape"), nlohmann::json::array());
  EXPECT_EQ(header.size(), order.size() + 1);  // the tensors and __metadata__
}

TEST_F(SafetensorsTest, FlippedByteNamesTheTensor) {
  const std::string path = write_small("flip.safetensors");
  std::string bytes = read_bytes(path);
  // "b" is the last tensor: its 16 bytes end the file.
  bytes[bytes.size() - 5] ^= 0x10;
  write_bytes(path, bytes);
  const std::string msg = error_of([&] { SafetensorsReader r(path); });
  EXPECT_THAT(msg, HasSubstr("checksum mismatch in tensor 'b' of " + path));
  EXPECT_THAT(msg, HasSubstr("the file is corrupt"));
}

TEST_F(SafetensorsTest, TruncatedFiles) {
  const std::string path = write_small("t.safetensors");
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const std::string cut = file("cut.safetensors");
  // Inside the size prefix, inside the header, inside the data.
  for (size_t keep : {size_t{0}, size_t{5}, size_t{8 + n / 2}, bytes.size() - 1}) {
    write_bytes(cut, bytes.substr(0, keep));
    EXPECT_THAT(error_of([&] { SafetensorsReader r(cut); }), HasSubstr(cut)) << keep;
  }
  write_bytes(cut, bytes.substr(0, 5));
  EXPECT_THAT(error_of([&] { SafetensorsReader r(cut); }), HasSubstr("only 5 bytes"));
  write_bytes(cut, bytes.substr(0, bytes.size() - 1));
  EXPECT_THAT(error_of([&] { SafetensorsReader r(cut); }), HasSubstr("tensor 'b'"));
}

TEST_F(SafetensorsTest, GarbageAndBadHeaderSize) {
  const std::string path = file("g.safetensors");
  std::mt19937 rng(3);
  std::string garbage(4096, '\0');
  for (char& c : garbage) c = static_cast<char>(rng());
  write_bytes(path, garbage);
  EXPECT_THAT(error_of([&] { SafetensorsReader r(path); }), HasSubstr(path));

  std::string huge(8, '\0');
  const uint64_t n = uint64_t{1} << 40;
  std::memcpy(huge.data(), &n, 8);
  write_bytes(path, huge + "{}");
  std::string msg = error_of([&] { SafetensorsReader r(path); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("1099511627776-byte JSON header"));

  const uint64_t all_ones = ~uint64_t{0};  // must not overflow the bounds check
  std::memcpy(huge.data(), &all_ones, 8);
  write_bytes(path, huge + "{}");
  EXPECT_THAT(error_of([&] { SafetensorsReader r(path); }), HasSubstr(path));

  write_bytes(path, raw_file("{\"a\": {\"dtype\": ", ""));
  msg = error_of([&] { SafetensorsReader r(path); });
  EXPECT_THAT(msg, HasSubstr("malformed JSON"));
  EXPECT_THAT(msg, HasSubstr(path));
  write_bytes(path, raw_file("[1, 2]", ""));
  EXPECT_THAT(error_of([&] { SafetensorsReader r(path); }), HasSubstr("not an object"));
  EXPECT_THAT(error_of([&] { SafetensorsReader r(file("missing.safetensors")); }),
              HasSubstr("missing.safetensors"));
}

// Hand-written headers, each wrong in one way, with 8 data bytes behind them.
TEST_F(SafetensorsTest, InvalidHeadersNameFileAndTensor) {
  const std::string path = file("bad.safetensors");
  const std::string data(8, '\x01');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"x": {"shape": [2], "data_offsets": [0, 8]}})", "lacks the field 'dtype'"},
      {R"({"x": {"dtype": "F32", "data_offsets": [0, 8]}})", "lacks the field 'shape'"},
      {R"({"x": {"dtype": "F32", "shape": [2]}})", "lacks the field 'data_offsets'"},
      {R"({"x": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}})", "unknown dtype 'Q4'"},
      {R"({"x": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", "shape entry -2"},
      {R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", "end before begin"},
      {R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}})", "beyond the 8"},
      {R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", "[begin, end] pair"},
      {R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", "need 12"},
      {R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
           "y": {"dtype": "U8", "shape": [2], "data_offsets": [3, 5]}})",
       "overlap"},
      {R"({"x": 5})", "not a JSON object"},
      {R"({"__metadata__": {"k": 5}})", "metadata entry 'k'"},
      {R"({"__metadata__": {"checksum.x": "00000000"}})", "for tensor 'x' that the file lacks"},
      {R"({"__metadata__": {"checksum.x": "zz"},
           "x": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}})",
       "not 8 hex digits"},
  };
  for (const auto& [header, want] : cases) {
    write_bytes(path, raw_file(header, data));
    const std::string msg = error_of([&] { SafetensorsReader r(path); });
    EXPECT_THAT(msg, HasSubstr(want)) << header;
    EXPECT_THAT(msg, HasSubstr(path)) << header;
    if (header.find("\"x\": {") != std::string::npos) {
      EXPECT_THAT(msg, HasSubstr("'x'")) << header;
    }
  }
}

// Files from other writers: no checksums, gaps between tensors, a zero-size
// tensor, trailing spaces in the header and an unaligned data start.
TEST_F(SafetensorsTest, ReadsForeignFilesWithoutChecksums) {
  const std::string path = file("foreign.safetensors");
  const float v[2] = {1.f, 2.f};
  std::string data(4, '\xAA');  // a gap before "x"
  data.append(reinterpret_cast<const char*>(v), 8);
  write_bytes(path, raw_file(R"({"__metadata__": {"format": "pt"},
      "x": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
      "e": {"dtype": "BF16", "shape": [0, 4], "data_offsets": [6, 6]}}   )",
                             data));
  SafetensorsReader r(path);
  float got[2] = {0, 0};
  r.read_f32("x", {2}, got);
  EXPECT_EQ(got[0], 1.f);
  EXPECT_EQ(got[1], 2.f);
  EXPECT_EQ(r.info("e").dtype, "BF16");
  EXPECT_EQ(r.metadata().at("format"), "pt");
}

TEST_F(SafetensorsTest, ReadF32ChecksShapeAndDtype) {
  const std::string path = write_small("s.safetensors");
  SafetensorsReader r(path);
  std::vector<float> out(6);
  std::string msg = error_of([&] { r.read_f32("a", {3, 2}, out.data()); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("'a'"));
  EXPECT_THAT(msg, HasSubstr("[2, 3]"));
  EXPECT_THAT(msg, HasSubstr("[3, 2]"));
  msg = error_of([&] { r.read_f32("b", {4}, out.data()); });
  EXPECT_THAT(msg, HasSubstr("dtype I32"));
  EXPECT_THAT(msg, HasSubstr(path));
}

TEST_F(SafetensorsTest, MissingTensorIsNamed) {
  const std::string path = write_small("n.safetensors");
  SafetensorsReader r(path);
  float x = 0;
  for (const std::string& msg :
       {error_of([&] { r.info("c"); }), error_of([&] { r.read_f32("c", {1}, &x); })}) {
    EXPECT_THAT(msg, HasSubstr("'c'"));
    EXPECT_THAT(msg, HasSubstr(path));
    EXPECT_THAT(msg, HasSubstr("a, b"));  // the names it does hold
  }
}

TEST_F(SafetensorsTest, AddValidatesItsArguments) {
  SafetensorsWriter w;
  const float f[4] = {};
  EXPECT_THAT(error_of([&] { w.add("x", "F33", {4}, f, 16); }), HasSubstr("unknown dtype 'F33'"));
  EXPECT_THAT(error_of([&] { w.add("x", "F32", {4}, f, 12); }), HasSubstr("needs 16 bytes"));
  EXPECT_THAT(error_of([&] { w.add("x", "F32", {-4}, f, 16); }), HasSubstr("invalid shape"));
  EXPECT_THAT(error_of([&] { w.add("__metadata__", "F32", {4}, f, 16); }),
              HasSubstr("invalid tensor name"));
  w.add("x", "F32", {4}, f, 16);
  EXPECT_THAT(error_of([&] { w.add("x", "U8", {16}, f, 16); }), HasSubstr("added twice"));
}

// A write that fails must leave the earlier file and no temporary behind.
TEST_F(SafetensorsTest, FailedWriteKeepsEarlierFile) {
  const std::string path = write_small("keep.safetensors");
  const std::string before = read_bytes(path);
  std::vector<float> big(1 << 18, 0.5f);  // 1 MiB
  SafetensorsWriter w;
  w.add_f32("big", {1 << 18}, big.data());

  // Disk full, as far as a root process can fake it: a file-size limit makes
  // write() fail with EFBIG part way through the data.
  rlimit old_limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old_limit;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string msg = error_of([&] { w.write(path); });
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr(std::strerror(EFBIG)));
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_TRUE(leftover_temporaries().empty());
  {
    SafetensorsReader r(path);
    EXPECT_EQ(r.names(), (std::vector<std::string>{"a", "b"}));
  }

  // A folder that turned into a regular file: the open of the temporary fails.
  const std::string not_a_dir = file("was_a_folder");
  write_bytes(not_a_dir, "x");
  const std::string inside = not_a_dir + "/m.safetensors";
  EXPECT_THAT(error_of([&] { w.write(inside); }), HasSubstr(inside));
  EXPECT_THAT(error_of([&] { w.write(file("no/such/folder.safetensors")); }),
              HasSubstr(std::strerror(ENOENT)));
  EXPECT_EQ(read_bytes(not_a_dir), "x");

  // After all that, a good write replaces the file and cleans up too.
  w.write(path);
  EXPECT_TRUE(leftover_temporaries().empty());
  SafetensorsReader r(path);
  EXPECT_EQ(r.names(), std::vector<std::string>{"big"});
}

}  // namespace
}  // namespace dendrite

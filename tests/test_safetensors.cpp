// safetensors reader, checkpoint and writer: round trips, one test per hostile input, the
// expected-vs-actual messages of get(), sharded checkpoints, the writer's no-partial-file
// guarantee, and a seeded fuzz test that every mutated file opens safely or is a db::Error.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "decodebench/error.h"
#include "decodebench/half.h"
#include "decodebench/safetensors.h"

namespace db {
namespace {

namespace fs = std::filesystem;

// A unique directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    path_ = fs::temp_directory_path() / ("decodebench-st-" + std::to_string(::getpid()) + "-" +
                                         std::to_string(counter++) + "-" + std::to_string(now));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A raw file: length field, the header text as given, then `data_bytes` bytes of data.
std::string raw_file(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\x5a');
}

// The message of the db::Error that `fn` throws; a test failure when it throws anything
// else or nothing.
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected db::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected db::Error, nothing was thrown";
  return "";
}

std::string open_error(const std::string& path) {
  return error_of([&] { SafetensorsFile f(path); });
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

// One hostile header per test: the open must fail, the message must start with the file
// and say what is wrong.
void expect_hostile(const std::string& bytes, const std::string& phrase) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  write_bytes(path, bytes);
  const std::string msg = open_error(path);
  EXPECT_EQ(msg.rfind("weights file " + path + ": ", 0), 0u) << msg;
  EXPECT_CONTAINS(msg, phrase);
}

TEST(Safetensors, DTypeNamesSizesAndShapes) {
  EXPECT_STREQ(to_string(DType::bf16), "BF16");
  EXPECT_STREQ(to_string(DType::boolean), "BOOL");
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::u8), 1u);
  EXPECT_EQ(shape_string({14336, 4096}), "[14336, 4096]");
  EXPECT_EQ(shape_string({}), "[]");
  TensorInfo t;
  t.shape = {3, 0, int64_t{1} << 62};
  EXPECT_EQ(t.elements(), 0);  // a zero dimension empties the tensor whatever the others are
  t.shape = {};
  EXPECT_EQ(t.elements(), 1);  // a scalar
}

TEST(Safetensors, RoundTripKeepsBytesDTypesShapesMetadataAndLayout) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};
  std::vector<uint16_t> f16, bf16;
  for (float v : f32) {
    f16.push_back(f32_to_f16(v));
    bf16.push_back(static_cast<uint16_t>(float_bits(v) >> 16));
  }
  const std::vector<int8_t> i8 = {-128, -1, 0, 1, 127};
  const std::vector<uint8_t> u8 = {0, 17, 255};
  const std::vector<int32_t> i32 = {-2147483647 - 1, 0, 2147483647, 42};
  const double f64 = 3.141592653589793;
  {
    SafetensorsWriter w(path);
    w.set_metadata("format", "decodebench");
    w.set_metadata("group_size", "128");
    w.add("z.f32", DType::f32, {2, 3}, f32.data());
    w.add("y.f16", DType::f16, {6}, f16.data());
    w.add("x.bf16", DType::bf16, {3, 2}, bf16.data());
    w.add("w.i8", DType::i8, {5}, i8.data());
    w.add("v.u8", DType::u8, {1, 3}, u8.data());
    w.add("u.i32", DType::i32, {4}, i32.data());
    w.add("t.scalar", DType::f64, {}, &f64);
    w.add("s.empty", DType::f16, {0, 4096}, nullptr);
    w.finish();
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  SafetensorsFile f(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"s.empty", "t.scalar", "u.i32", "v.u8", "w.i8", "x.bf16",
                                                 "y.f16", "z.f32"}));
  EXPECT_EQ(f.metadata(),
            (std::map<std::string, std::string>{{"format", "decodebench"}, {"group_size", "128"}}));
  const auto same = [](const TensorInfo& t, const void* p, size_t n) {
    return t.nbytes == n && std::memcmp(t.data, p, n) == 0;
  };
  EXPECT_TRUE(same(f.get("z.f32", DType::f32, {2, 3}), f32.data(), 24));
  EXPECT_TRUE(same(f.get("y.f16", DType::f16, {6}), f16.data(), 12));
  EXPECT_TRUE(same(f.get("x.bf16", DType::bf16, {3, 2}), bf16.data(), 12));
  EXPECT_TRUE(same(f.get("w.i8", DType::i8, {5}), i8.data(), 5));
  EXPECT_TRUE(same(f.get("v.u8", DType::u8, {1, 3}), u8.data(), 3));
  EXPECT_TRUE(same(f.get("u.i32", DType::i32, {4}), i32.data(), 16));
  EXPECT_TRUE(same(f.get("t.scalar", DType::f64, {}), &f64, 8));
  EXPECT_EQ(f.get("s.empty", DType::f16, {0, 4096}).nbytes, 0u);
  EXPECT_EQ(f.get("x.bf16").elements(), 6);
  EXPECT_EQ(f16_to_f32(f.get("y.f16").data[2] | (f.get("y.f16").data[3] << 8)), -2.0f);

  // Layout: __metadata__ first, entries in the order added, data 8-byte aligned and packed
  // back to back in that order.
  const std::string bytes = read_bytes(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);  // the test machines are little-endian
  EXPECT_EQ((8 + header_len) % 8, 0u);
  const std::string header = bytes.substr(8, header_len);
  EXPECT_EQ(header.rfind("{\"__metadata__\":{", 0), 0u) << header;
  EXPECT_LT(header.find("\"z.f32\""), header.find("\"y.f16\""));
  EXPECT_LT(header.find("\"y.f16\""), header.find("\"x.bf16\""));
  EXPECT_LT(header.find("\"u.i32\""), header.find("\"t.scalar\""));
  const uint8_t* data0 = f.get("z.f32").data;
  EXPECT_EQ(f.get("y.f16").data, data0 + 24);
  EXPECT_EQ(f.get("x.bf16").data, data0 + 36);
  EXPECT_EQ(f.get("w.i8").data, data0 + 48);
  EXPECT_EQ(f.get("t.scalar").data, data0 + 24 + 12 + 12 + 5 + 3 + 16);
  EXPECT_EQ(bytes.size(), 8 + header_len + 24 + 12 + 12 + 5 + 3 + 16 + 8);
}

TEST(Safetensors, FillCallbacksRunAtFinishOneTensorAtATime) {
  TempDir dir;
  const std::string path = dir.file("filled.safetensors");
  std::vector<std::string> calls;
  SafetensorsWriter w(path);
  for (int k = 0; k < 3; ++k) {
    const std::string name = "t" + std::to_string(k);
    w.add(name, DType::u8, {4 + k}, [&calls, name, k](uint8_t* out) {
      calls.push_back(name);
      for (int i = 0; i < 4 + k; ++i) out[i] = static_cast<uint8_t>(10 * k + i);
    });
  }
  EXPECT_TRUE(calls.empty()) << "fill must be deferred to finish(), where it streams to the file";
  w.finish();
  EXPECT_EQ(calls, (std::vector<std::string>{"t0", "t1", "t2"}));
  SafetensorsFile f(path);
  const TensorInfo& t2 = f.get("t2", DType::u8, {6});
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t2.data[i], 20 + i);
}

TEST(Safetensors, EmptyFileOfTensorsOpens) {
  TempDir dir;
  const std::string path = dir.file("empty.safetensors");
  SafetensorsWriter(path).finish();
  SafetensorsFile f(path);
  EXPECT_TRUE(f.names().empty());
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_EQ(f.find("anything"), nullptr);
}

TEST(SafetensorsHostile, FileShorterThanTheLengthField) {
  expect_hostile(std::string("\x10\0\0", 3), "shorter than the 8-byte");
}

TEST(SafetensorsHostile, HeaderLengthPastTheEnd) {
  expect_hostile(le64(4096) + "{}", "header length 4096 is past the end");
  expect_hostile(le64(~uint64_t{0}) + "{}", "past the end");
}

TEST(SafetensorsHostile, HeaderLengthAboveTheLimit) {
  // A sparse file big enough to hold the claimed header: the limit, not the file end, trips.
  TempDir dir;
  const std::string path = dir.file("huge.safetensors");
  write_bytes(path, le64(100'000'001) + "{");
  fs::resize_file(path, 100'000'100);
  const std::string msg = open_error(path);
  EXPECT_CONTAINS(msg, "header length 100000001 is larger than the 100000000-byte limit");
}

TEST(SafetensorsHostile, HeaderNotJson) {
  expect_hostile(raw_file("{\"a\": [1, 2", 0), "header: invalid JSON");
}

// As the reference implementation: the header is an object from its first byte.
TEST(SafetensorsHostile, HeaderIsAJsonArray) {
  expect_hostile(raw_file("[1, 2, 3]", 0), "header does not start with '{'");
  expect_hostile(raw_file(" {}", 0), "header does not start with '{'");
}

TEST(SafetensorsHostile, UnknownDType) {
  expect_hostile(raw_file(R"({"a":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]}})", 4),
                 "tensor 'a' has unknown dtype 'F8_E5M2' (known: F64, F32, F16, BF16, I64, I32, I16, I8, U8, "
                 "BOOL, F8_E4M3)");
}

TEST(SafetensorsHostile, OffsetsPastTheDataSection) {
  expect_hostile(raw_file(R"({"a":{"dtype":"U8","shape":[4096],"data_offsets":[0,4096]}})", 1024),
                 "tensor 'a' data_offsets [0, 4096] exceed the data section (1024 bytes)");
}

TEST(SafetensorsHostile, TruncatedDataSection) {
  TempDir dir;
  const std::string path = dir.file("ok.safetensors");
  const std::vector<float> v(64, 1.0f);
  SafetensorsWriter w(path);
  w.add("w", DType::f32, {64}, v.data());
  w.finish();
  const std::string bytes = read_bytes(path);
  expect_hostile(bytes.substr(0, bytes.size() - 1), "exceed the data section");
}

TEST(SafetensorsHostile, OverlappingOffsets) {
  expect_hostile(raw_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                          R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                          24),
                 "tensors 'a' data_offsets [0, 16] and 'b' data_offsets [8, 24] overlap");
}

// Zero-size tensors own no bytes: several may sit at one offset, between their neighbours
// in offset order (where the reference implementation's tiling puts them), but not inside
// another tensor's bytes.
TEST(SafetensorsHostile, ZeroSizeTensorsSitBetweenTheirNeighbours) {
  TempDir dir;
  const std::string path = dir.file("zeros.safetensors");
  write_bytes(path, raw_file(R"({"b":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                             R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                             R"("c":{"dtype":"I8","shape":[2,0],"data_offsets":[16,16]},)"
                             R"("d":{"dtype":"I8","shape":[0],"data_offsets":[16,16]}})",
                             16));
  SafetensorsFile f(path);
  EXPECT_EQ(f.names().size(), 4u);
  EXPECT_EQ(f.get("c").nbytes, 0u);
  expect_hostile(raw_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                          R"("b":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}})",
                          16),
                 "tensors 'a' data_offsets [0, 16] and 'b' data_offsets [8, 8] overlap");
}

TEST(SafetensorsHostile, ByteCountDisagreesWithOffsets) {
  expect_hostile(
      raw_file(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24),
      "tensor 'a' shape [2, 3] with dtype F32 needs 24 bytes, but its data_offsets [0, 20] hold 20");
}

TEST(SafetensorsHostile, OffsetsEndBeforeTheyBegin) {
  expect_hostile(raw_file(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}})", 8),
                 "end before they begin");
}

TEST(SafetensorsHostile, ShapeWhoseByteCountOverflows) {
  expect_hostile(
      raw_file(
          R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776,1099511627776],"data_offsets":[0,0]}})",
          0),
      "overflows");
  expect_hostile(raw_file(R"({"a":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}})", 0),
                 "overflows");
}

TEST(SafetensorsHostile, NegativeDimension) {
  expect_hostile(raw_file(R"({"a":{"dtype":"F32","shape":[4,-1],"data_offsets":[0,0]}})", 0),
                 "tensor 'a' has a negative dimension -1");
}

TEST(SafetensorsHostile, NonIntegerDimensionAndMissingFields) {
  expect_hostile(raw_file(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
                 "expected a non-negative integer");
  expect_hostile(raw_file(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4), "tensor 'a' has no dtype");
  expect_hostile(raw_file(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4), "tensor 'a' has no shape");
  expect_hostile(raw_file(R"({"a":{"dtype":"F32","shape":[1]}})", 4), "tensor 'a' has no data_offsets");
  expect_hostile(raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 8),
                 "data_offsets must be [begin, end]");
  expect_hostile(raw_file(R"({"a":[1,2]})", 0), "tensor 'a' is a JSON array, expected an object");
}

TEST(SafetensorsHostile, MetadataValueNotAString) {
  expect_hostile(raw_file(R"({"__metadata__":{"group_size":128}})", 0),
                 "__metadata__ value for 'group_size' is a JSON number, expected a string");
  expect_hostile(raw_file(R"({"__metadata__":["format"]})", 0), "__metadata__ is a JSON array");
}

TEST(SafetensorsHostile, DuplicateTensorName) {
  expect_hostile(raw_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                          R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                          2),
                 "field a appears twice in one object");
}

TEST(SafetensorsHostile, ControlBytesInNamesStayOnOneLine) {
  TempDir dir;
  const std::string path = dir.file("ctl.safetensors");
  write_bytes(path, raw_file(R"({"a\nb":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1));
  const std::string msg = open_error(path);
  EXPECT_CONTAINS(msg, "'a\\x0ab'");
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(SafetensorsHostile, DirectoryMissingFileAndFifo) {
  TempDir dir;
  EXPECT_CONTAINS(open_error(dir.path().string()), "is a directory");
  const std::string missing = dir.file("missing.safetensors");
  EXPECT_EQ(open_error(missing), "weights file " + missing + ": cannot open: No such file or directory");
  const std::string fifo = dir.file("fifo.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_CONTAINS(open_error(fifo), "is not a regular file");  // and it does not hang
}

TEST(Safetensors, GetNamesFileTensorExpectedAndActual) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const std::vector<uint16_t> w(8 * 4, 0);
  SafetensorsWriter writer(path);
  writer.add("model.layers.3.mlp.up_proj.weight", DType::f16, {8, 4}, w.data());
  writer.finish();
  SafetensorsFile f(path);
  const std::string name = "model.layers.3.mlp.up_proj.weight";
  EXPECT_EQ(error_of([&] {
              f.get(name, DType::f16, {8, 2});
            }),
            "weights file " + path + ": tensor " + name + " has shape [8, 4], expected [8, 2]");
  EXPECT_EQ(error_of([&] {
              f.get(name, DType::f32, {8, 4});
            }),
            "weights file " + path + ": tensor " + name + " has dtype F16, expected F32");
  EXPECT_EQ(error_of([&] { f.get("lm_head.weight"); }),
            "weights file " + path + ": no tensor named lm_head.weight");
  EXPECT_EQ(f.find("lm_head.weight"), nullptr);
  EXPECT_EQ(f.find(name), &f.get(name));
}

// Two shards and an index in `dir`; shard 2 also holds a tensor the index does not name.
void write_sharded(const TempDir& dir) {
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6}, c = {7, 8, 9};
  SafetensorsWriter s1(dir.file("model-00001-of-00002.safetensors"));
  s1.set_metadata("format", "pt");
  s1.add("a", DType::f32, {2, 2}, a.data());
  s1.add("b", DType::f32, {2}, b.data());
  s1.finish();
  SafetensorsWriter s2(dir.file("model-00002-of-00002.safetensors"));
  s2.set_metadata("format", "second");
  s2.add("c", DType::f32, {3}, c.data());
  s2.add("stray", DType::f32, {1}, c.data());
  s2.finish();
  write_bytes(dir.file("model.safetensors.index.json"),
              R"({"metadata":{"total_size":36},"weight_map":{"c":"model-00002-of-00002.safetensors",)"
              R"("a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors"}})");
}

TEST(Checkpoint, ShardedIndexRoutesEachTensorToItsShard) {
  TempDir dir;
  write_sharded(dir);
  for (const std::string& path : {dir.file("model.safetensors.index.json"), dir.path().string()}) {
    Checkpoint ck(path);
    EXPECT_EQ(ck.path(), path);
    EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b", "c"}));  // "stray" is not in the index
    EXPECT_EQ(ck.find("stray"), nullptr);
    float v[3];
    std::memcpy(v, ck.get("c", DType::f32, {3}).data, sizeof v);
    EXPECT_EQ(v[2], 9.0f);
    std::memcpy(v, ck.get("b").data, 8);
    EXPECT_EQ(v[1], 6.0f);
    EXPECT_EQ(ck.metadata().at("format"), "pt");  // the first shard in name order
    // Shape errors name the shard that holds the tensor; a missing name names the index.
    EXPECT_CONTAINS(error_of([&] { ck.get("c", DType::f32, {4}); }),
                    "model-00002-of-00002.safetensors: tensor c has shape [3], expected [4]");
    EXPECT_CONTAINS(error_of([&] { ck.get("stray"); }),
                    "model.safetensors.index.json: no tensor named stray");
  }
}

TEST(Checkpoint, SingleFileAndDirectoryWithModelSafetensors) {
  TempDir dir;
  const std::vector<float> a = {1, 2};
  SafetensorsWriter w(dir.file("model.safetensors"));
  w.set_metadata("format", "decodebench");
  w.add("a", DType::f32, {2}, a.data());
  w.finish();
  for (const std::string& path : {dir.file("model.safetensors"), dir.path().string()}) {
    Checkpoint ck(path);
    EXPECT_EQ(ck.names(), std::vector<std::string>{"a"});
    EXPECT_EQ(ck.metadata().at("format"), "decodebench");
    EXPECT_CONTAINS(error_of([&] { ck.get("b"); }), "model.safetensors: no tensor named b");
  }
}

TEST(Checkpoint, DirectoryPrefersTheIndexOverModelSafetensors) {
  TempDir dir;
  write_sharded(dir);
  const std::vector<float> z = {0};
  SafetensorsWriter w(dir.file("model.safetensors"));
  w.add("only_in_single", DType::f32, {1}, z.data());
  w.finish();
  Checkpoint ck(dir.path().string());
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b", "c"}));
}

TEST(Checkpoint, DirectoryWithNeitherSaysWhatItLookedFor) {
  TempDir dir;
  const std::string msg = error_of([&] { Checkpoint ck(dir.path().string()); });
  EXPECT_CONTAINS(msg, "model.safetensors.index.json");
  EXPECT_CONTAINS(msg, "model.safetensors");
  EXPECT_CONTAINS(msg, dir.path().string());
}

TEST(Checkpoint, IndexNamingAMissingShardFailsAtConstruction) {
  TempDir dir;
  write_sharded(dir);
  fs::remove(dir.file("model-00002-of-00002.safetensors"));
  const std::string msg = error_of([&] { Checkpoint ck(dir.path().string()); });
  EXPECT_CONTAINS(msg, "shard 'model-00002-of-00002.safetensors'");
  EXPECT_CONTAINS(msg, "does not exist");
}

TEST(Checkpoint, ShardLackingATensorOfTheIndexFailsAtConstruction) {
  TempDir dir;
  write_sharded(dir);
  write_bytes(
      dir.file("model.safetensors.index.json"),
      R"({"weight_map":{"a":"model-00001-of-00002.safetensors","c":"model-00001-of-00002.safetensors"}})");
  EXPECT_CONTAINS(
      error_of([&] { Checkpoint ck(dir.path().string()); }),
      "tensor 'c' is mapped to shard 'model-00001-of-00002.safetensors', which does not contain it");
}

TEST(Checkpoint, MalformedIndex) {
  TempDir dir;
  const std::string index = dir.file("model.safetensors.index.json");
  write_bytes(index, "{\"weight_map\": ");
  EXPECT_CONTAINS(error_of([&] { Checkpoint ck(index); }), "invalid JSON");
  write_bytes(index, R"({"metadata":{}})");
  EXPECT_CONTAINS(error_of([&] { Checkpoint ck(index); }), "has no \"weight_map\" object");
  write_bytes(index, R"({"weight_map":{"a":3}})");
  EXPECT_CONTAINS(error_of([&] { Checkpoint ck(index); }),
                  "weight_map entry for 'a' is not a shard file name");
  EXPECT_CONTAINS(error_of([&] { Checkpoint ck(dir.file("nope.index.json")); }), "cannot open");
}

// The writer's temporary file is its own (anonymous where the filesystem allows, else a
// hidden unique name): nothing under the final name before finish(), nothing at all after
// a writer that never finished.
TEST(SafetensorsWriter, NeverFinishedLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("out.safetensors");
  {
    const std::vector<float> v(16, 1.0f);
    SafetensorsWriter w(path);
    w.add("a", DType::f32, {16}, v.data());
    EXPECT_FALSE(fs::exists(path));
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(SafetensorsWriter, ThrowingFillLeavesNoFileAndKeepsTheOldOne) {
  TempDir dir;
  const std::string path = dir.file("out.safetensors");
  const std::vector<float> v(4, 2.0f);
  {
    SafetensorsWriter w(path);
    w.add("old", DType::f32, {4}, v.data());
    w.finish();
  }
  const std::string before = read_bytes(path);
  {
    SafetensorsWriter w(path);
    w.add("a", DType::f32, {4}, v.data());
    w.add("b", DType::f32, {4}, [](uint8_t*) { throw Error("quantizer gave up"); });
    EXPECT_EQ(error_of([&] { w.finish(); }), "quantizer gave up");
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    EXPECT_CONTAINS(error_of([&] { w.finish(); }), "abandoned");
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(read_bytes(path), before);  // an interrupted write never replaces a good file
}

TEST(SafetensorsWriter, RejectsDuplicateAndReservedNamesAndBadPaths) {
  TempDir dir;
  const std::string path = dir.file("out.safetensors");
  const uint8_t byte = 1;
  {
    SafetensorsWriter w(path);
    w.add("a", DType::u8, {1}, &byte);
    EXPECT_CONTAINS(error_of([&] { w.add("a", DType::u8, {1}, &byte); }), "tensor a added twice");
    EXPECT_CONTAINS(error_of([&] { w.add("__metadata__", DType::u8, {1}, &byte); }), "reserved");
    EXPECT_CONTAINS(error_of([&] { w.add("n", DType::u8, {-1}, &byte); }), "negative dimension");
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const std::string bad = dir.file("no/such/dir/out.safetensors");
  EXPECT_EQ(error_of([&] { SafetensorsWriter w(bad); }),
            "cannot write " + bad + ": No such file or directory");
}

// ---------------------------------------------------------------------------------------
// Fuzz: every mutation of a valid file either opens, with every tensor inside the mapping
// of the file and readable, or is a db::Error whose message is one line naming the file.

// The [begin, end) of this process's mapping of `file`, from the kernel's view (not the
// reader's), so the bounds check below does not trust the code it checks.
bool find_mapping(const std::string& file, uintptr_t* begin) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos || line.compare(slash, std::string::npos, file) != 0) continue;
    uint64_t offset = 0;
    std::istringstream in(line);
    std::string range, perms;
    in >> range >> perms >> std::hex >> offset;
    if (offset != 0) continue;
    *begin = static_cast<uintptr_t>(std::stoull(range.substr(0, range.find('-')), nullptr, 16));
    return true;
  }
  return false;
}

std::string base_file(const TempDir& dir) {
  const std::string path = dir.file("base.safetensors");
  std::vector<uint8_t> bytes(512);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 37 + 11);
  SafetensorsWriter w(path);
  w.set_metadata("format", "decodebench");
  w.set_metadata("quant", "int4");
  w.add("model.embed_tokens.weight", DType::bf16, {8, 4}, bytes.data());
  w.add("model.layers.0.self_attn.q_proj.qweight", DType::u8, {4, 8}, bytes.data());
  w.add("model.layers.0.self_attn.q_proj.scales", DType::f16, {4, 2}, bytes.data());
  w.add("model.norm.weight", DType::f32, {6}, bytes.data());
  w.add("e", DType::i8, {0}, bytes.data());
  w.add("s", DType::f64, {}, bytes.data());
  w.add("i", DType::i32, {3}, bytes.data());
  w.add("model.layers.0.mlp.up_proj.qweight", DType::u8, {2, 16}, bytes.data());  // 32 bytes, as q_proj
  w.finish();
  return read_bytes(path);
}

// Edits that keep the header valid JSON, so the checks after parsing get exercised: an
// entry copied under a new name (overlap) or its own name (duplicate), data_offsets copied
// from another tensor, the metadata value or the whole header replaced by another type.
template <class Pick>
void structural_edit(std::string& f, uint64_t* header_len, Pick& pick) {
  if (f.size() < 8 || *header_len > f.size() - 8) return;
  std::string h = f.substr(8, *header_len);
  std::vector<size_t> entries, offsets;
  for (size_t p = h.find("{\"dtype\""); p != std::string::npos; p = h.find("{\"dtype\"", p + 1))
    entries.push_back(p);
  for (size_t p = h.find("\"data_offsets\":["); p != std::string::npos;
       p = h.find("\"data_offsets\":[", p + 1))
    offsets.push_back(p + 16);
  const char* others[] = {"1", "null", "[]", "{}", "\"x\"", "true", "{\"a\":\"b\"}", "-3"};
  switch (pick(4)) {
    case 0: {  // copy a whole entry, `"name":{...}`, under a new name or the same one
      if (entries.empty()) return;
      const size_t open = entries[pick(entries.size())];
      const size_t name_begin = h.rfind('"', h.rfind('"', open - 2) - 1);
      const size_t close = h.find('}', open);
      if (name_begin == std::string::npos || close == std::string::npos) return;
      std::string copy = h.substr(name_begin, close + 1 - name_begin);
      if (pick(2)) copy.insert(1, "copy.");
      h.insert(close + 1, "," + copy);
      break;
    }
    case 1: {  // data_offsets of one tensor given to another
      if (offsets.size() < 2) return;
      const size_t from = offsets[pick(offsets.size())], to = offsets[pick(offsets.size())];
      const std::string value = h.substr(from, h.find(']', from) - from);
      h.replace(to, h.find(']', to) - to, value);
      break;
    }
    case 2: {  // a metadata value of another JSON type
      const size_t p = h.find("\"decodebench\"");
      if (p == std::string::npos) return;
      h.replace(p, 13, others[pick(std::size(others))]);
      break;
    }
    case 3:  // the header itself of another JSON type
      h = others[pick(std::size(others))];
      break;
  }
  f.replace(8, *header_len, h);
  *header_len = h.size();
}

TEST(SafetensorsFuzz, MutatedFilesOpenSafelyOrThrowDbError) {
  TempDir dir;
  const std::string base = base_file(dir);
  uint64_t base_header_len = 0;
  std::memcpy(&base_header_len, base.data(), 8);
  // A fresh file per iteration: on ext4, truncating and rewriting one file forces a
  // writeback on close (auto_da_alloc), which made 20000 iterations take 28 s instead of 2.
  const std::string real_dir = fs::canonical(dir.path()).string();
  // clang-format off
  const std::vector<std::string> snippets = {
      "{", "}", "[", "]", ",", ":", "\"", "null", "true", "-1", "0", "1e400", "1.5", "\n", "\xff\xfe",
      "18446744073709551615", "18446744073709551616", "9223372036854775807", "[0,0]", "[]", "{}",
      "\"F32\"", "\"BF16\"", "\"Q4\"", "\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"__metadata__\"",
      "\"\\u0000\"", "\"\\ud800\"", R"("__metadata__":{"k":1},)", R"("x":{"dtype":"U8","shape":[1],)",
      R"("data_offsets":[0,99999999999])", R"("shape":[1099511627776,1099511627776,1099511627776])",
      R"("data_offsets":[4,0])", R"("model.norm.weight":{"dtype":"U8","shape":[24],)",
      std::string(20000, '[') + std::string(20000, ']')};  // nesting deep enough to find recursion
  // clang-format on
  std::mt19937_64 rng(20240601);
  const auto pick = [&rng](uint64_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<uint64_t>(0, n - 1)(rng);
  };
  const auto set_len = [](std::string& f, uint64_t v) {
    if (f.size() >= 8) f.replace(0, 8, le64(v));
  };
  int opened = 0, rejected = 0;
  const int kIterations = 10000;
  for (int it = 0; it < kIterations; ++it) {
    std::string f = base;
    uint64_t header_len = base_header_len;
    const int mutations = 1 + static_cast<int>(pick(3));
    for (int m = 0; m < mutations; ++m) {
      switch (pick(10)) {
        case 0:  // flip bytes in the header
          for (uint64_t k = 1 + pick(4); k > 0 && header_len > 0 && f.size() > 8; --k)
            f[8 + pick(std::min<uint64_t>(header_len, f.size() - 8))] ^= static_cast<char>(1 + pick(255));
          break;
        case 1:  // flip bytes anywhere
          for (uint64_t k = 1 + pick(4); k > 0 && !f.empty(); --k)
            f[pick(f.size())] ^= static_cast<char>(1 + pick(255));
          break;
        case 2:  // truncate
          f.resize(pick(f.size() + 1));
          break;
        case 3: {  // overwrite the length field
          const uint64_t choice = pick(3);
          const uint64_t v = choice == 0   ? rng()
                             : choice == 1 ? pick(f.size() + 16)
                                           : header_len + pick(17) - 8;
          set_len(f, v);
          break;
        }
        case 4:
        case 5: {  // splice a JSON snippet into the header, usually keeping the length consistent
          if (f.size() < 8 || header_len > f.size() - 8) break;
          const uint64_t at = 8 + pick(header_len + 1);
          const uint64_t cut = std::min<uint64_t>(pick(12), 8 + header_len - at);
          const std::string& s = snippets[pick(snippets.size())];
          f.replace(at, cut, s);
          header_len = header_len - cut + s.size();
          if (pick(4) != 0) set_len(f, header_len);
          break;
        }
        case 7:  // flip bytes in the data section only: the file must still open
          for (uint64_t k = 1 + pick(8); k > 0 && f.size() > 8 + header_len; --k)
            f[8 + header_len + pick(f.size() - 8 - header_len)] ^= static_cast<char>(1 + pick(255));
          break;
        case 8: {  // insert whitespace between JSON tokens, keeping the length consistent
          if (f.size() < 8 || header_len > f.size() - 8) break;
          const std::string ws[] = {" ", "\t", "\n", "\r\n", "    "};
          for (uint64_t at = 8; at < 8 + header_len; ++at) {
            if (std::strchr("{}[],:", f[at]) == nullptr || pick(4) != 0) continue;
            const std::string& w = ws[pick(std::size(ws))];
            f.insert(at + 1, w);
            header_len += w.size();
            at += w.size();
          }
          set_len(f, header_len);
          break;
        }
        case 9:  // a structural edit that keeps the JSON valid
          structural_edit(f, &header_len, pick);
          set_len(f, header_len);
          break;
        case 6: {  // replace a number in the header with an edge value
          if (f.size() < 8 || header_len > f.size() - 8) break;
          std::vector<size_t> digits;
          for (size_t i = 8; i < 8 + header_len; ++i)
            if (f[i] >= '0' && f[i] <= '9' && (f[i - 1] < '0' || f[i - 1] > '9')) digits.push_back(i);
          if (digits.empty()) break;
          const size_t at = digits[pick(digits.size())];
          size_t end = at;
          while (end < 8 + header_len && f[end] >= '0' && f[end] <= '9') ++end;
          const char* edge[] = {"0", "1", "7", "8", "16", "24", "31", "4294967296", "9223372036854775808"};
          const std::string v =
              pick(3) ? edge[pick(std::size(edge))] : std::to_string(pick(2) ? pick(200) : rng());
          f.replace(at, end - at, v);
          header_len = header_len - (end - at) + v.size();
          set_len(f, header_len);
          break;
        }
      }
    }
    const std::string name = "fuzz-" + std::to_string(it) + ".safetensors";
    const std::string path = dir.file(name);
    const std::string real_path = real_dir + "/" + name;
    write_bytes(path, f);
    struct Remove {
      std::string p;
      ~Remove() { ::unlink(p.c_str()); }
    } remove_after{path};
    try {
      SafetensorsFile st(path);
      ++opened;
      uintptr_t map_begin = 0;
      ASSERT_TRUE(find_mapping(real_path, &map_begin))
          << "iteration " << it << ": no mapping of " << real_path;
      for (const auto& name : st.names()) {
        const TensorInfo& t = st.get(name);
        ASSERT_EQ(&st.get(name, t.dtype, t.shape), &t);
        ASSERT_EQ(t.nbytes, static_cast<uint64_t>(t.elements()) * dtype_size(t.dtype));
        const auto p = reinterpret_cast<uintptr_t>(t.data);
        ASSERT_GE(p, map_begin + 8) << "iteration " << it << " tensor " << name;
        ASSERT_LE(p - map_begin + t.nbytes, f.size()) << "iteration " << it << " tensor " << name;
        ASSERT_EQ(std::memcmp(t.data, f.data() + (p - map_begin), t.nbytes), 0) << "iteration " << it;
      }
    } catch (const Error& e) {
      ++rejected;
      const std::string msg = e.what();
      ASSERT_EQ(msg.rfind("weights file " + path + ": ", 0), 0u) << "iteration " << it << ": " << msg;
      ASSERT_EQ(msg.find('\n'), std::string::npos) << "iteration " << it << ": " << msg;
      ASSERT_LT(msg.size(), 1200u) << "iteration " << it << ": " << msg;
    } catch (const std::exception& e) {
      FAIL() << "iteration " << it << ": exception other than db::Error: " << e.what();
    } catch (...) {
      FAIL() << "iteration " << it << ": non-std exception";
    }
  }
  // Both outcomes must be well exercised, or the mutations are not reaching the validator.
  EXPECT_GT(opened, kIterations / 20);
  EXPECT_GT(rejected, kIterations / 4);
  std::cout << "[ fuzz     ] " << kIterations << " mutated files: " << opened << " opened, " << rejected
            << " rejected with db::Error\n";
}

}  // namespace
}  // namespace db

// The archive check of load (detail/archive_check.hpp): a saved module changed after it was saved,
// cut short, or with a damaged zip structure is refused with a message that names the file and
// the record; intact files (and every module in tests/data) load. And the CRC32 it rests on.
#include "helpers.hpp"

#include <torch_delegate/detail/archive_check.hpp>

#include <caffe2/serialize/inline_container.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>

using namespace test_helpers;

namespace archive_tests {

/// Packs the module's weight at preprocess, so that the lowered module's processed payload holds
/// it as a tensor record of the saved archive (as a real backend's packed weights are).
struct WeightBackend {
  static constexpr std::string_view name = "td_test_archive_weight";
  static at::Tensor preprocess(const torch_delegate::method_to_lower& method) {
    return method.module().attr("weight").toTensor();
  }
  static bool is_available() { return true; }
  static at::Tensor compile(const at::Tensor& weight) { return weight.contiguous(); }
  static at::Tensor execute(at::Tensor& weight, const at::Tensor& x) { return at::matmul(x, weight); }
};

/// 64 KiB of weights whose bytes (and so CRC32) are the same on every machine.
torch::jit::Module weighted_module() {
  torch::jit::Module module("m");
  module.register_parameter("weight", torch::arange(16384, at::kFloat).reshape({128, 128}) * 1e-4, false);
  module.define("def forward(self, x):\n    return torch.matmul(x, self.weight)\n");
  return module;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

/// The saved record of `size` bytes: its full name in the archive ("<archive>/data/<n>") and the
/// byte where its data starts in the file.
std::pair<std::string, std::size_t> record_of_size(const std::string& path, std::size_t size) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  for (const std::string& name : reader.getAllRecords()) {
    if (std::get<1>(reader.getRecord(name)) != size) continue;
    const std::string file = std::filesystem::path(path).stem().string();
    return {file + "/" + name, reader.getRecordOffset(name)};
  }
  FAIL("no record of ", size, " bytes in ", path);
  return {};
}

std::uint32_t little_endian32(const std::string& bytes, std::size_t at) {
  std::uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
  return value;
}
std::uint64_t little_endian64(const std::string& bytes, std::size_t at) {
  return little_endian32(bytes, at) | (std::uint64_t{little_endian32(bytes, at + 4)} << 32);
}

/// "torch-delegate: <path>: <what>; refusing to load it": every refusal's shape.
std::string refusal(const std::string& path, const std::string& what) {
  return "torch-delegate: " + path + ": " + what + "; refusing to load it";
}

/// A zip archive with one stored record whose sizes and offset are all in ZIP64 extra fields,
/// with a data descriptor of 8-byte sizes: the layout PyTorchStreamWriter (miniz) writes for
/// records of 4 GiB and more, or that start past 4 GiB, made small.
std::string zip64_archive(const std::string& name, const std::string& data) {
  std::string out;
  const auto put = [&](std::uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
  };
  const std::uint32_t crc = torch_delegate::detail::crc32(0, data.data(), data.size());
  // Local header: sizes deferred to the descriptor; a ZIP64 extra field (8-byte zero sizes).
  put(0x04034b50, 4), put(45, 2), put(0x0808, 2), put(0, 2), put(0, 2), put(0, 2), put(0, 4);
  put(0xFFFFFFFF, 4), put(0xFFFFFFFF, 4), put(name.size(), 2), put(20, 2);
  out += name;
  put(1, 2), put(16, 2), put(0, 8), put(0, 8);
  out += data;
  put(0x08074b50, 4), put(crc, 4), put(data.size(), 8), put(data.size(), 8);
  const std::size_t directory = out.size();
  put(0x02014b50, 4), put(45, 2), put(45, 2), put(0x0808, 2), put(0, 2), put(0, 2), put(0, 2), put(crc, 4);
  put(0xFFFFFFFF, 4), put(0xFFFFFFFF, 4), put(name.size(), 2), put(28, 2), put(0, 2), put(0, 2), put(0, 2), put(0, 4);
  put(0xFFFFFFFF, 4);
  out += name;
  put(1, 2), put(24, 2), put(data.size(), 8), put(data.size(), 8), put(0, 8);
  const std::size_t directory_size = out.size() - directory, zip64_end = out.size();
  put(0x06064b50, 4), put(44, 8), put(45, 2), put(45, 2), put(0, 4), put(0, 4), put(1, 8), put(1, 8);
  put(directory_size, 8), put(directory, 8);
  put(0x07064b50, 4), put(0, 4), put(zip64_end, 8), put(1, 4);
  put(0x06054b50, 4), put(0, 2), put(0, 2), put(0xFFFF, 2), put(0xFFFF, 2), put(0xFFFFFFFF, 4), put(0xFFFFFFFF, 4);
  put(0, 2);
  return out;
}

}  // namespace archive_tests

using namespace archive_tests;

TEST_CASE("crc32: zlib's CRC-32, by carry-less multiplication and by tables alike") {
  using torch_delegate::detail::crc32;
  using torch_delegate::detail::crc32_by_tables;
  CHECK(crc32(0, "123456789", 9) == 0xCBF43926u);  // the check value of CRC-32/ISO-HDLC
  CHECK(crc32(0, "", 0) == 0u);
  // Python: zlib.crc32(bytes(range(256)) * 16) == 0xa2912082 (its own, independent implementation).
  std::string counting;
  for (int i = 0; i < 4096; ++i) counting += static_cast<char>(i & 0xff);
  CHECK(crc32(0, counting.data(), counting.size()) == 0xa2912082u);
  CHECK(crc32_by_tables(0, counting.data(), counting.size()) == 0xa2912082u);
  std::mt19937 random(37);
  std::string bytes(1 << 16, '\0');
  for (char& byte : bytes) byte = static_cast<char>(random());
  // Every length around the paths' boundaries (tables below 256 bytes, 64-byte folds, 16-byte
  // folds, a tail of up to 15 bytes), from aligned and unaligned starts.
  for (std::size_t size : {0, 1, 7, 8, 15, 16, 63, 64, 65, 127, 255, 256, 257, 271, 319, 320, 1000, 4096, 4111, 65535}) {
    for (std::size_t start : {0, 1, 3, 8}) {
      if (start + size > bytes.size()) continue;
      INFO("size ", size, ", start ", start);
      CHECK(crc32(0x1234abcd, bytes.data() + start, size) == crc32_by_tables(0x1234abcd, bytes.data() + start, size));
    }
  }
  // Continued: the CRC of a followed by b.
  const std::uint32_t whole = crc32(0, bytes.data(), bytes.size());
  CHECK(crc32(crc32(0, bytes.data(), 1000), bytes.data() + 1000, bytes.size() - 1000) == whole);
}

TEST_CASE("load refuses a lowered module whose weight record was changed after it was saved") {
  const std::string path = temp_path("archive_weights.pt");
  torch::jit::Module original = weighted_module();
  torch_delegate::lower<WeightBackend>(original).save(path);
  const at::Tensor x = torch::ones({2, 128});
  const at::Tensor expected = original.forward({x}).toTensor();
  CHECK(torch_delegate::load<WeightBackend>(path).forward({x}).toTensor().equal(expected));

  const auto [record, start] = record_of_size(path, 16384 * 4);
  std::string bytes = read_file(path);
  for (std::size_t i = 0; i < 4096; ++i) bytes[start + 1000 + i] = static_cast<char>(bytes[start + 1000 + i] ^ 0x55);
  const std::string damaged = temp_path("archive_damaged.pt");
  write_file(damaged, bytes);
  // The CRC32s: Python's zlib.crc32 of the record's data after and before the change.
  const std::string expected_error =
      refusal(damaged, "record '" + record + "' is damaged: the CRC32 of its 65536 bytes is 0xd5e4ae6e, the archive "
                       "says 0xe648e2d9 (the file was changed after it was saved)");
  CHECK(error_of([&] { torch_delegate::load<WeightBackend>(damaged); }) == expected_error);
  CHECK(error_of([&] { torch_delegate::load(damaged); }) == expected_error);
  CHECK(error_of([&] { torch_delegate::check_loadable(damaged); }) == expected_error);
  CHECK(error_of([&] { torch_delegate::check_archive(damaged); }) == expected_error);
  // Why the check exists: LibTorch 1.13's reader does not compare the CRC32s. Unchecked, the
  // file loads and runs with the changed weights.
  const at::Tensor changed = torch_delegate::load<WeightBackend>(damaged, {.verify = false}).forward({x}).toTensor();
  CHECK_FALSE(changed.allclose(expected));
  CHECK(torch::jit::load(damaged).forward({x}).toTensor().equal(changed));
  // Intact again, it loads.
  for (std::size_t i = 0; i < 4096; ++i) bytes[start + 1000 + i] = static_cast<char>(bytes[start + 1000 + i] ^ 0x55);
  write_file(damaged, bytes);
  CHECK(torch_delegate::load<WeightBackend>(damaged).forward({x}).toTensor().equal(expected));
  std::filesystem::remove(path);
  std::filesystem::remove(damaged);
}

TEST_CASE("load refuses a file whose headers or central directory were changed, or that was cut short") {
  const std::string path = temp_path("archive_headers.pt");
  torch_delegate::lower<WeightBackend>(weighted_module()).save(path);
  const std::string intact = read_file(path);
  const auto [record, start] = record_of_size(path, 16384 * 4);
  const std::string damaged = temp_path("archive_header_damaged.pt");
  const auto refused = [&](std::string bytes) {
    write_file(damaged, bytes);
    return error_of([&] { torch_delegate::load<WeightBackend>(damaged); });
  };
  const std::string damaged_record = "record '" + record + "' is damaged: ";

  // The record's CRC32 in the central directory (its entry: 46 bytes before the last copy of its name).
  const std::size_t entry = intact.rfind(record) - 46;
  REQUIRE(little_endian32(intact, entry) == 0x02014b50u);
  std::string bytes = intact;
  bytes[entry + 16] = static_cast<char>(bytes[entry + 16] ^ 0x01);
  CHECK(refused(bytes) == refusal(damaged, damaged_record + "its data descriptor (at byte " + std::to_string(start + 65536) +
                                               ") says its CRC32 is 0xe648e2d9, the central directory says 0xe648e2d8"));

  // Its name in the central directory: the local header disagrees.
  bytes = intact;
  bytes[entry + 46 + record.size() - 1] = 'x';
  const std::string renamed = record.substr(0, record.size() - 1) + "x";
  const std::size_t local = intact.rfind(record, start) - 30;
  CHECK(refused(bytes) == refusal(damaged, "record '" + renamed + "' is damaged: its local header (at byte " +
                                               std::to_string(local) + ") names it '" + record + "'"));

  // Its local header's offset: no local header there.
  bytes = intact;
  bytes[entry + 42] = static_cast<char>(bytes[entry + 42] ^ 0x01);
  CHECK(refused(bytes) == refusal(damaged, damaged_record + "there is no local header at byte " +
                                               std::to_string(local ^ 1) + ", where the central directory says it starts"));

  // The end record's offset of the central directory disagrees with the ZIP64 end record's.
  const std::size_t end = intact.size() - 22;
  REQUIRE(little_endian32(intact, end) == 0x06054b50u);
  const std::uint32_t directory = little_endian32(intact, end + 16);
  bytes = intact;
  bytes[end + 16] = static_cast<char>(bytes[end + 16] ^ 0x01);
  CHECK(refused(bytes) == refusal(damaged, "the end-of-central-directory record says the central directory's offset is " +
                                               std::to_string(directory ^ 1) + ", the zip64 end record says " +
                                               std::to_string(directory) + ": the file is damaged"));

  // The ZIP64 locator points elsewhere.
  const std::size_t locator = end - 20;
  REQUIRE(little_endian32(intact, locator) == 0x07064b50u);
  const std::uint64_t zip64_end = little_endian64(intact, locator + 8);
  bytes = intact;
  bytes[locator + 8] = static_cast<char>(bytes[locator + 8] ^ 0x02);
  CHECK(refused(bytes) == refusal(damaged, "the zip64 end-of-central-directory locator (at byte " + std::to_string(locator) +
                                               ") points at byte " + std::to_string(zip64_end ^ 2) +
                                               ", where there is no zip64 end-of-central-directory record: the file is "
                                               "damaged"));

  // Cut short: the end records are gone.
  const std::string cut = refusal(damaged, "not a zip archive, or one cut short: it has no end-of-central-directory "
                                           "record (a saved module ends with one)");
  CHECK(refused(intact.substr(0, intact.size() / 2)) == cut);
  CHECK(refused(intact.substr(0, intact.size() - 1)) == cut);
  CHECK(refused("") == cut);
  CHECK(error_of([&] { torch_delegate::load(temp_path("archive_missing.pt")); }) ==
        "torch-delegate: cannot read '" + temp_path("archive_missing.pt") +
            "' as a saved TorchScript module: cannot open it: No such file or directory");
  std::filesystem::remove(path);
  std::filesystem::remove(damaged);
}

TEST_CASE("a deflated record (TorchScript code) is checked too: inflated, then its CRC32") {
  const std::string path = temp_path("archive_code.pt");
  torch_delegate::lower<WeightBackend>(weighted_module()).save(path);
  std::string bytes = read_file(path);
  // The first code record that is deflated (small ones are stored: deflating would not shrink them).
  caffe2::serialize::PyTorchStreamReader reader(path);
  const std::string archive = std::filesystem::path(path).stem().string() + "/";
  std::string full;
  std::size_t local = 0;
  for (const std::string& name : reader.getAllRecords()) {
    if (name.size() < 3 || name.compare(name.size() - 3, 3, ".py") != 0) continue;
    local = bytes.find(archive + name) - 30;
    REQUIRE(little_endian32(bytes, local) == 0x04034b50u);
    if ((static_cast<unsigned char>(bytes[local + 8]) | (static_cast<unsigned char>(bytes[local + 9]) << 8)) == 8) {
      full = archive + name;
      break;
    }
  }
  REQUIRE(!full.empty());
  // One bit of its 9th byte of deflated data changed (every deflated code record is longer).
  const std::size_t data = local + 30 + full.size() + (static_cast<unsigned char>(bytes[local + 28]) |
                                                       (static_cast<unsigned char>(bytes[local + 29]) << 8));
  bytes[data + 8] = static_cast<char>(bytes[data + 8] ^ 0x10);
  const std::string damaged = temp_path("archive_code_damaged.pt");
  write_file(damaged, bytes);
  const std::string error = error_of([&] { torch_delegate::check_archive(damaged); });
  CHECK_CONTAINS(error, "torch-delegate: " + damaged + ": record '" + full + "' is damaged: ");
  CHECK_CONTAINS(error, "; refusing to load it");
  std::filesystem::remove(path);
  std::filesystem::remove(damaged);
}

TEST_CASE("ZIP64 records: sizes and offsets in extra fields, a data descriptor with 8-byte sizes") {
  const std::string data(5000, 'w');
  std::string archive = zip64_archive("big/data/0", data);
  const auto check = [&](const std::string& bytes) {
    torch_delegate::detail::check_archive_bytes("big.pt", reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  };
  CHECK_NOTHROW(check(archive));
  const std::uint32_t crc = torch_delegate::detail::crc32(0, data.data(), data.size());
  std::string changed = archive;
  changed[30 + 10 + 20 + 100] = 'x';
  const std::string changed_data = std::string(100, 'w') + "x" + std::string(4899, 'w');
  char expected[200];
  std::snprintf(expected, sizeof expected,
                "record 'big/data/0' is damaged: the CRC32 of its 5000 bytes is 0x%08x, the archive says 0x%08x",
                torch_delegate::detail::crc32_by_tables(0, changed_data.data(), changed_data.size()), crc);
  CHECK(error_of([&] { check(changed); }) ==
        refusal("big.pt", std::string(expected) + " (the file was changed after it was saved)"));
  // The descriptor's 8-byte size, one byte changed.
  changed = archive;
  changed[30 + 10 + 20 + 5000 + 8] ^= 1;
  CHECK(error_of([&] { check(changed); }) ==
        refusal("big.pt", "record 'big/data/0' is damaged: its data descriptor (at byte 5060) says its compressed size is "
                          "5001, the central directory says 5000"));
  // The central directory's ZIP64 extra field cut to one size: the offset is missing.
  changed = archive;
  const std::size_t entry = changed.rfind("big/data/0") - 46;
  changed[entry + 46 + 10 + 2] = 16;
  CHECK_CONTAINS(error_of([&] { check(changed); }),
                 "the central directory is damaged: entry 0 (at byte " + std::to_string(entry) +
                     "), record 'big/data/0', says its sizes or offset are in a zip64 extra field, which it lacks");
}

TEST_CASE("the modules saved by earlier builds (tests/data) pass the check") {
  std::size_t checked = 0;
  for (const auto& file : std::filesystem::directory_iterator(TD_TEST_DATA_DIR)) {
    if (file.path().extension() != ".pt" && file.path().extension() != ".ptl") continue;
    INFO(file.path().string());
    CHECK_NOTHROW(torch_delegate::check_archive(file.path().string()));
    ++checked;
  }
  CHECK(checked >= 8);
}

// libFuzzer target: the archive check of load (detail/archive_check.hpp) on arbitrary bytes,
// seeded with small archives in PyTorchStreamWriter's layout (data descriptors, ZIP64 end
// records; one of them with every size and offset in ZIP64 extra fields) and in Python zipfile's.
// The check accepts the input or throws c10::Error; it never crashes or reads outside the input
// (libFuzzer's buffer is exactly `size` bytes: ASan sees a read past it). The CRC32's two paths
// (carry-less multiplication, tables) must agree on every input.
#include <torch_delegate/detail/archive_check.hpp>

#include <c10/util/Exception.h>

#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace torch_delegate::detail;
  if (crc32(0, data, size) != crc32_by_tables(0, data, size)) std::abort();
  try {
    check_archive_bytes("fuzz.pt", data, size);
  } catch (const c10::Error&) {
  }
  return 0;
}

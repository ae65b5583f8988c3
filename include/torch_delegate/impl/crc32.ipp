// Definitions for detail/archive_check.hpp: CRC32 (zip's polynomial), by slicing-by-8 tables and,
// where the CPU has PCLMULQDQ, by carry-less multiplication folding. archive_check.ipp includes it.
#pragma once

#include <torch_delegate/detail/archive_check.hpp>

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>

namespace torch_delegate::detail {

namespace crc {

// Table k holds the CRC register contribution of a byte followed by k zero bytes, so that eight
// bytes cost eight independent lookups instead of eight dependent ones (slicing-by-8). Built on
// first use: computing them at compile time would cost every header-only translation unit.
inline const std::array<std::array<std::uint32_t, 256>, 8>& tables() {
  static const auto built = [] {
    std::array<std::array<std::uint32_t, 256>, 8> table{};
    for (std::uint32_t byte = 0; byte < 256; ++byte) {
      std::uint32_t value = byte;
      for (int bit = 0; bit < 8; ++bit) value = (value & 1) ? (value >> 1) ^ 0xEDB88320u : value >> 1;
      table[0][byte] = value;
    }
    for (std::size_t k = 1; k < 8; ++k)
      for (std::uint32_t byte = 0; byte < 256; ++byte)
        table[k][byte] = (table[k - 1][byte] >> 8) ^ table[0][table[k - 1][byte] & 0xff];
    return table;
  }();
  return built;
}

// The CRC register after `size` more bytes (no inversion: crc32 inverts before and after).
inline std::uint32_t update_by_tables(std::uint32_t state, const unsigned char* data, std::size_t size) {
  const auto& table = tables();
  if constexpr (std::endian::native == std::endian::little) {
    for (; size >= 8; data += 8, size -= 8) {
      std::uint32_t low, high;
      std::memcpy(&low, data, 4);
      std::memcpy(&high, data + 4, 4);
      low ^= state;
      state = table[7][low & 0xff] ^ table[6][(low >> 8) & 0xff] ^ table[5][(low >> 16) & 0xff] ^ table[4][low >> 24] ^
              table[3][high & 0xff] ^ table[2][(high >> 8) & 0xff] ^ table[1][(high >> 16) & 0xff] ^ table[0][high >> 24];
    }
  }
  for (; size > 0; ++data, --size) state = table[0][(state ^ *data) & 0xff] ^ (state >> 8);
  return state;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TORCH_DELEGATE_CRC32_CLMUL 1

// Folding with carry-less multiplication (the method of Intel's paper "Fast CRC Computation for
// Generic Polynomials Using PCLMULQDQ"): four 16-byte lanes, each multiplied forward by 64 bytes
// and added to the next block, until one 16-byte value is left whose CRC is the CRC of all that
// was folded into it. GCC's vector extension and builtin instead of <immintrin.h>, which would be
// parsed by every header-only translation unit.
typedef long long clmul_block __attribute__((vector_size(16)));

// x^n mod P for the CRC-32 polynomial P (0x104C11DB7, not reflected).
constexpr std::uint64_t x_power_mod(unsigned n) {
  std::uint64_t remainder = 1;
  for (unsigned i = 0; i < n; ++i) {
    remainder <<= 1;
    if (remainder & (std::uint64_t{1} << 32)) remainder ^= 0x104C11DB7u;
  }
  return remainder;
}

constexpr long long reflected(std::uint64_t value) {
  std::uint64_t out = 0;
  for (int bit = 0; bit < 64; ++bit) out |= ((value >> bit) & 1) << (63 - bit);
  return static_cast<long long>(out);
}

// The multipliers that move a block `distance` bits forward. A little-endian 16-byte load holds
// the coefficient of x^(127-i) in bit i (CRC-32 is reflected): its low half is multiplied by
// x^(distance+64), its high half by x^distance, each reduced mod P and stored as x times a
// residue (x * (x^(k-1) mod P)), reflected over 64 bits so that the product lands in the same
// bit order as the data.
constexpr clmul_block fold_multipliers(unsigned distance) {
  return clmul_block{reflected(x_power_mod(distance + 63)), reflected(x_power_mod(distance - 1))};
}

__attribute__((target("sse2,pclmul"))) inline clmul_block fold(clmul_block value, clmul_block multipliers) {
  return __builtin_ia32_pclmulqdq128(value, multipliers, 0x00) ^ __builtin_ia32_pclmulqdq128(value, multipliers, 0x11);
}

__attribute__((target("sse2,pclmul"))) inline clmul_block load_block(const unsigned char* at) {
  clmul_block block;
  std::memcpy(&block, at, sizeof block);
  return block;
}

// The CRC register after `size` (>= 64) more bytes.
__attribute__((target("sse2,pclmul"))) inline std::uint32_t update_by_clmul(std::uint32_t state, const unsigned char* data,
                                                                           std::size_t size) {
  constexpr clmul_block by_64_bytes = fold_multipliers(512);
  constexpr clmul_block by_16_bytes = fold_multipliers(128);
  clmul_block lane0 = load_block(data) ^ clmul_block{static_cast<long long>(state), 0};
  clmul_block lane1 = load_block(data + 16), lane2 = load_block(data + 32), lane3 = load_block(data + 48);
  data += 64;
  size -= 64;
  for (; size >= 64; data += 64, size -= 64) {
    lane0 = fold(lane0, by_64_bytes) ^ load_block(data);
    lane1 = fold(lane1, by_64_bytes) ^ load_block(data + 16);
    lane2 = fold(lane2, by_64_bytes) ^ load_block(data + 32);
    lane3 = fold(lane3, by_64_bytes) ^ load_block(data + 48);
  }
  clmul_block folded = fold(fold(fold(lane0, by_16_bytes) ^ lane1, by_16_bytes) ^ lane2, by_16_bytes) ^ lane3;
  for (; size >= 16; data += 16, size -= 16) folded = fold(folded, by_16_bytes) ^ load_block(data);
  unsigned char last[16];
  std::memcpy(last, &folded, sizeof last);
  return update_by_tables(update_by_tables(0, last, sizeof last), data, size);
}

inline bool has_clmul() {
  static const bool supported = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
  }();
  return supported;
}
#endif

}  // namespace crc

TORCH_DELEGATE_DECL std::uint32_t crc32_by_tables(std::uint32_t crc, const void* data, std::size_t size) {
  return ~crc::update_by_tables(~crc, static_cast<const unsigned char*>(data), size);
}

TORCH_DELEGATE_DECL std::uint32_t crc32(std::uint32_t crc, const void* data, std::size_t size) {
#ifdef TORCH_DELEGATE_CRC32_CLMUL
  // Below 256 bytes the tables win: the folding's fixed cost (16 bytes through the tables) dominates.
  if (size >= 256 && crc::has_clmul())
    return ~crc::update_by_clmul(~crc, static_cast<const unsigned char*>(data), size);
#endif
  return crc32_by_tables(crc, data, size);
}

}  // namespace torch_delegate::detail

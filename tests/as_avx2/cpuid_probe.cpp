// What bench/as_avx2.py's test runs: the AVX-512 and AVX2 bits of CPUID leaf 7 as this program,
// libgcc's __builtin_cpu_supports and a dlopen'd library see them; a line read from stdin echoed
// (the ORT runner talks over stdin and stdout); exit code 7.
#include <cpuid.h>
#include <dlfcn.h>

#include <cstdio>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: cpuid_probe <libcpuid_probe_lib.so>\n";
    return 2;
  }
  std::string line;
  std::getline(std::cin, line);
  std::cout << "read " << line << "\n";
  unsigned a = 0, b = 0, c = 0, d = 0;
  __cpuid_count(7, 0, a, b, c, d);
  std::cout << "leaf7 avx512f=" << ((b >> 16) & 1U) << " avx512bw=" << ((b >> 30) & 1U) << " avx2=" << ((b >> 5) & 1U)
            << "\n";
  std::cout << "builtin avx512f=" << (__builtin_cpu_supports("avx512f") ? 1 : 0) << "\n";
  void* library = dlopen(argv[1], RTLD_NOW);
  if (library == nullptr) {
    std::cerr << "cpuid_probe: " << dlerror() << "\n";
    return 3;
  }
  auto probe = reinterpret_cast<int (*)()>(dlsym(library, "td_probe_lib_avx512f"));
  std::cout << "dlopened avx512f=" << (probe ? probe() : -1) << "\n";
  std::cout.flush();
  return 7;
}

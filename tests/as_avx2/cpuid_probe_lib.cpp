// A library the probe loads with dlopen: its cpuid runs in code loaded after the process started,
// as ONNX Runtime's does (onnxruntime-node dlopens libonnxruntime.so).
#include <cpuid.h>

extern "C" int td_probe_lib_avx512f() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  __cpuid_count(7, 0, a, b, c, d);
  return static_cast<int>((b >> 16) & 1U);
}

// What compile-cost measures: a typical backend translation unit (the demo backend's shared
// library TU: the struct, its runtime, registration of both halves).
#include "../examples/backend_with_compiler_demo/register_demo_backend.cpp"

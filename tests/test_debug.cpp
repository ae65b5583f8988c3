// Debuggability: debug handles for every node, errors that point at the model's source (full
// JIT, typed path, after save/load, lite interpreter, through submodules), ExecuTorch-style
// instruction maps, profiler events, and the coverage report.
#include "backends.hpp"
#include "helpers.hpp"

#include <backend_with_compiler_demo/demo_backend.hpp>

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/jit/mobile/import.h>
#include <torch/csrc/jit/mobile/module.h>

#include <mutex>
#include <set>
#include <thread>

using namespace test_helpers;

namespace {

/// Records the debug handle of every node preprocess sees, nested blocks included.
inline std::vector<std::int64_t> seen_handles;

void collect(const torch_delegate::method_to_lower& method, const torch::jit::Block* block) {
  for (const torch::jit::Node* node : block->nodes()) {
    seen_handles.push_back(method.debug_handle(node));
    for (const torch::jit::Block* nested : node->blocks()) collect(method, nested);
  }
}

struct HandleRecordingBackend : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_test_handles";
  static std::string preprocess(const torch_delegate::method_to_lower& method) {
    collect(method, method.graph()->block());
    return GenericBackend::preprocess(method);
  }
};

/// Fuses a method's add and sub into instruction 0 and fails there: errors must show both.
struct FusingBackend {
  static constexpr std::string_view name = "td_test_fusing";
  static torch_delegate::preprocess_result<std::string> preprocess(const torch_delegate::method_to_lower& method) {
    torch_delegate::preprocess_result<std::string> result{"fused", {}};
    for (const torch::jit::Node* node : method.graph()->nodes())
      if (node->kind() == c10::aten::add || node->kind() == c10::aten::sub)
        result.instruction_handles[0].push_back(method.debug_handle(node));
    return result;
  }
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload) { return payload; }
  static at::Tensor execute(std::string&, const at::Tensor& x, const at::Tensor& h) {
    if (x.dim() > 1) torch_delegate::raise_at(0, "fused kernel failed");
    try {
      throw std::runtime_error("kernel threw its own exception");
    } catch (...) {
      torch_delegate::rethrow_at(0);
    }
  }
};

torch::jit::Module module_with_submodule() {
  torch::jit::Module sub("Sub");
  sub.define("def forward(self, x, h):\n    return x + h\n");
  torch::jit::Module top("Top");
  top.register_module("adder", sub);
  top.define("def forward(self, x, h):\n    return self.adder.forward(x, h) - h\n");
  return top;
}

void check_points_at_add(const std::string& error) {
  CHECK_CONTAINS(error, "torch-delegate: backend 'backend_with_compiler_demo', method 'forward': in execute: "
                        "backend_with_compiler_demo: aten::add: shapes [2, 4] and [13, 9] are not broadcastable");
  CHECK_CONTAINS(error, "The failing instruction implements aten::add (debug handle ");
  CHECK_CONTAINS(error, "return x + h");
  CHECK_CONTAINS(error, "~~~~~ <--- HERE");
}

const at::Tensor bad_x = torch::rand({2, 4});
const at::Tensor bad_h = torch::rand({13, 9});
}  // namespace

TEST_CASE("every node gets a debug handle, nested blocks included; the table survives save/load") {
  auto module = script(R"(
def forward(self, x, h):
    y = x
    if bool(x.sum() > 0):
        for i in range(3):
            y = y + h
    else:
        y = y - h
    return y
)");
  seen_handles.clear();
  auto lowered = torch_delegate::lower<HandleRecordingBackend>(module);
  REQUIRE(seen_handles.size() > 8);
  CHECK(std::set<std::int64_t>(seen_handles.begin(), seen_handles.end()).size() == seen_handles.size());

  const std::string path = temp_path("handles.pt");
  lowered.save(path);
  auto loaded = torch::jit::load(path);
  auto processed = loaded.attr("__loweredModule__").toModule().attr("__processed_module");
  auto debug = torch_delegate::detail::decode_debug_info(
      processed.toTupleRef().elements()[3].toGenericDict().at("forward").toTupleRef().elements()[4]);
  for (std::int64_t handle : seen_handles) CHECK_MESSAGE(debug->locations.count(handle), handle);
  bool saw_loop_add = false;
  for (const auto& [handle, where] : debug->locations)
    if (where.node_kind == "aten::add") saw_loop_add = contains(where.source, "y = y + h");
  CHECK(saw_loop_add);
  std::filesystem::remove(path);
}

TEST_CASE("run-time errors show the model's source: full JIT, typed path, after save/load") {
  auto lowered = torch_delegate::lower<demo::DemoBackend>(script("def forward(self, x, h):\n    return x + h\n"));
  check_points_at_add(error_of([&] { lowered.forward({bad_x, bad_h}); }));
  check_points_at_add(error_of([&] { lowered.method<at::Tensor(at::Tensor, at::Tensor)>("forward")(bad_x, bad_h); }));
  const std::string path = temp_path("debug.pt");
  lowered.save(path);
  check_points_at_add(error_of([&] { torch::jit::load(path).forward({bad_x, bad_h}); }));
  std::filesystem::remove(path);
}

TEST_CASE("run-time errors show the model's source in the lite interpreter") {
  auto lowered = torch_delegate::lower<demo::DemoBackend>(script("def forward(self, x, h):\n    return x + h\n"));
  const std::string path = temp_path("debug.ptl");
  lowered.module()._save_for_mobile(path, {}, /*save_mobile_debug_info=*/true);
  auto mobile = torch::jit::_load_for_mobile(path);
  check_points_at_add(error_of([&] { mobile.forward({bad_x, bad_h}); }));
  std::filesystem::remove(path);
}

TEST_CASE("run-time errors through submodules show the frame of each submodule") {
  auto lowered = torch_delegate::lower<demo::DemoBackend>(module_with_submodule());
  const std::string error = error_of([&] { lowered.forward({bad_x, bad_h}); });
  check_points_at_add(error);
  CHECK_CONTAINS(error, "entering submodule 'adder' (__torch__.Sub), method forward:");
  CHECK_CONTAINS(error, "return self.adder.forward(x, h) - h");
}

TEST_CASE("ExecuTorch-style instruction maps: a fused instruction shows every original node") {
  auto lowered = torch_delegate::lower<FusingBackend>(script("def forward(self, x, h):\n    return (x + h) - h\n"));
  const std::string error = error_of([&] { lowered.forward({torch::rand({2, 2}), torch::rand({2, 2})}); });
  CHECK_CONTAINS(error, "in execute: fused kernel failed");
  CHECK_CONTAINS(error, "implements aten::add");
  CHECK_CONTAINS(error, "implements aten::sub");
  const std::string rethrown = error_of([&] { lowered.forward({torch::rand({2}), torch::rand({2})}); });
  CHECK_CONTAINS(rethrown, "in execute: kernel threw its own exception");
  CHECK_CONTAINS(rethrown, "implements aten::sub");
}

TEST_CASE("profiling: delegated instructions appear in the PyTorch profiler under the model's names") {
  auto lowered = torch_delegate::lower<demo::DemoBackend>(script("def forward(self, x, h):\n    return x + h - h\n"));
  using namespace torch::autograd::profiler;
  torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  prepareProfiler(config, {torch::profiler::impl::ActivityType::CPU});
  enableProfiler(config, {torch::profiler::impl::ActivityType::CPU});
  lowered.forward({torch::rand({3}), torch::rand({3})});
  auto result = disableProfiler();
  std::vector<std::string> names;
  for (const auto& event : result->events()) {
    if (event.backend() != "backend_with_compiler_demo") continue;
    names.push_back(event.name());
    CHECK(event.debugHandle() >= 0);
    CHECK(event.durationUs() >= 0);
  }
  REQUIRE(names.size() == 2);
  CHECK(names[0] == "aten::add (<string>:2)");
  CHECK(names[1] == "aten::sub (<string>:2)");
  // Without a profiler nothing is recorded and nothing is slower than a flag check.
  CHECK_FALSE(torch_delegate::profiling());
}

namespace {
/// Adds in chunks on at::parallel_for's threads through torch_delegate::parallel_for; each chunk
/// reports the add instruction to the profiler, and the thread it ran on.
std::mutex chunk_threads_mutex;
std::set<std::thread::id> chunk_threads;
struct ParallelBackend {
  static constexpr std::string_view name = "td_test_parallel";
  static std::string preprocess(const torch_delegate::method_to_lower& method) {
    for (const torch::jit::Node* node : method.graph()->nodes())
      if (node->kind() == c10::aten::add) return std::to_string(method.debug_handle(node));
    method.reject(method.graph()->return_node(), "no add");
    return {};
  }
  static bool is_available() { return true; }
  static std::int64_t compile(const std::string& payload) { return std::stoll(payload); }
  static at::Tensor execute(std::int64_t& add_handle, const at::Tensor& x, const at::Tensor& h) {
    at::Tensor out = at::empty_like(x);
    const float* a = x.data_ptr<float>();
    const float* b = h.data_ptr<float>();
    float* c = out.data_ptr<float>();
    torch_delegate::parallel_for(0, x.numel(), 1, [&](std::int64_t begin, std::int64_t end) {
      torch_delegate::instruction_timer timer(add_handle);
      for (std::int64_t i = begin; i < end; ++i) c[i] = a[i] + b[i];
      std::lock_guard<std::mutex> lock(chunk_threads_mutex);
      chunk_threads.insert(std::this_thread::get_id());
    });
    return out;
  }
};
}  // namespace

TEST_CASE("profiling: instructions timed on at::parallel_for's worker threads reach the profiler") {
  auto lowered = torch_delegate::lower<ParallelBackend>(script("def forward(self, x, h):\n    return x + h\n"));
  const int threads_before = at::get_num_threads();
  at::set_num_threads(2);
  using namespace torch::autograd::profiler;
  torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  prepareProfiler(config, {torch::profiler::impl::ActivityType::CPU});
  enableProfiler(config, {torch::profiler::impl::ActivityType::CPU});
  chunk_threads.clear();
  const at::Tensor x = torch::rand({1 << 16}), h = torch::rand({1 << 16});
  const at::Tensor sum = lowered.forward({x, h}).toTensor();
  auto result = disableProfiler();
  at::set_num_threads(threads_before);
  CHECK(sum.equal(x + h));
  std::size_t events = 0;
  std::set<std::uint64_t> event_threads;
  for (const auto& event : result->events()) {
    if (event.backend() != "td_test_parallel") continue;
    ++events;
    event_threads.insert(event.startThreadId());
    CHECK(event.name() == "aten::add (<string>:2)");
  }
  // One event per chunk, from every thread that ran one (the worker's too).
  CHECK(chunk_threads.size() == 2);
  CHECK(events >= 2);
  CHECK(event_threads.size() == chunk_threads.size());
}

TEST_CASE("coverage report: accepted and rejected nodes per method, with sources and counts") {
  auto module = script(R"(
def forward(self, x, h):
    y = x + h
    return y * h

def accum(self, x, h):
    return x + h - h
)");
  auto report = torch_delegate::coverage<demo::DemoBackend>(module, {"forward", "accum"});
  REQUIRE(report.methods.size() == 2);
  CHECK(report.methods[0].method == "forward");
  CHECK(report.methods[0].unsupported == 1);
  CHECK(report.methods[0].supported == 2);  // the constant alpha and aten::add
  CHECK(report.methods[1].unsupported == 0);
  CHECK_FALSE(report.fully_supported());
  const std::string text = report.to_string();
  CHECK_CONTAINS(text, "coverage of __torch__.m by backend 'backend_with_compiler_demo'\n"
                       "  forward: 2 of 3 nodes supported, 1 unsupported\n"
                       "    unsupported aten::mul at <string>:4\n");
  CHECK_CONTAINS(text, "return y * h");
  CHECK_CONTAINS(text, "  accum: 3 of 3 nodes supported\n");
  // The report agrees with lowering.
  CHECK_CONTAINS(error_of([&] { torch_delegate::lower<demo::DemoBackend>(module); }), "aten::mul");
  CHECK_NOTHROW(torch_delegate::lower<demo::DemoBackend>(module, {{"accum", {}}}));
}

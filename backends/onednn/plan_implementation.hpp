// One primitive of an onednn plan as the debug query lists it (docs/onednn.md#which-kernels-a-plan-runs):
// plain strings, no LibTorch (the planner, which fills them, does not include it).
#pragma once

#include <string>

namespace onednn_delegate {

/// One primitive of a plan, as the debug query lists it (docs/onednn.md#which-kernels-a-plan-runs).
struct plan_implementation {
  std::string method;          // the lowered method (a region of a partial lowering: its name)
  std::string shapes;          // the input shapes the plan was made for, e.g. "[1, 3, 96, 96]"
  std::string step;            // the region's step it runs, e.g. "4 convolution" ("output 0": a result's reorder)
  std::string kind;            // oneDNN's primitive kind (convolution, reorder, binary, ...); ATen's op for a step run there
  std::string implementation;  // oneDNN's impl_info_str (jit_1x1:avx2, brgconv:avx512_core, ref:any) or ATen's op ("aten::conv2d")
};

}  // namespace onednn_delegate

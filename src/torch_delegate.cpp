// libtorch_delegate: the non-template machinery of torch-delegate, compiled once. Used when a
// program defines TORCH_DELEGATE_SEPARATE_COMPILATION (Meson: the torch_delegate_compiled
// dependency); header-only builds compile the same definitions inline instead.
#define TORCH_DELEGATE_BUILDING_LIBRARY
#include <torch_delegate/torch_delegate.hpp>
#include <torch_delegate/partition.hpp>

#include <torch_delegate/impl/archive_check.ipp>
#include <torch_delegate/impl/attention_calls.ipp>
#include <torch_delegate/impl/backend_lowering.ipp>
#include <torch_delegate/impl/canonical_graph.ipp>
#include <torch_delegate/impl/codegen.ipp>
#include <torch_delegate/impl/coverage.ipp>
#include <torch_delegate/impl/debug.ipp>
#include <torch_delegate/impl/dispatch.ipp>
#include <torch_delegate/impl/load.ipp>
#include <torch_delegate/impl/locations.ipp>
#include <torch_delegate/impl/lowering_plan.ipp>
#include <torch_delegate/impl/input_spec.ipp>
#include <torch_delegate/impl/lower.ipp>
#include <torch_delegate/impl/named_data.ipp>
#include <torch_delegate/impl/partition.ipp>
#include <torch_delegate/impl/partition_assign.ipp>
#include <torch_delegate/impl/partition_checks.ipp>
#include <torch_delegate/impl/partition_extract.ipp>
#include <torch_delegate/impl/partition_layouts.ipp>
#include <torch_delegate/impl/partition_rewrite.ipp>
#include <torch_delegate/impl/payload_format.ipp>
#include <torch_delegate/impl/preprocess.ipp>
#include <torch_delegate/impl/profiling.ipp>
#include <torch_delegate/impl/regions.ipp>
#include <torch_delegate/impl/registration.ipp>
#include <torch_delegate/impl/report.ipp>
#include <torch_delegate/impl/report_format.ipp>
#include <torch_delegate/impl/runtime_objects.ipp>
#include <torch_delegate/impl/runtime_switches.ipp>
#include <torch_delegate/impl/shape_folding.ipp>
#include <torch_delegate/impl/shape_folding_analysis.ipp>
#include <torch_delegate/impl/shape_ranges.ipp>
#include <torch_delegate/impl/signature.ipp>
#include <torch_delegate/impl/tuning.ipp>
#include <torch_delegate/impl/tuning_lowering.ipp>
#include <torch_delegate/impl/measured_lowering.ipp>
#include <torch_delegate/impl/tuning_timing.ipp>
#include <torch_delegate/impl/cached_timing.ipp>
#include <torch_delegate/impl/timing_cache.ipp>
#include <torch_delegate/impl/timing_statistics.ipp>
#include <torch_delegate/impl/version.ipp>

// Which orders choose_order screens before timing their regions one by one (tuning_lowering.ipp,
// tune_lowered): the rule alone, on counts a partition gives. No LibTorch here.
#pragma once

#include <cstddef>

namespace torch_delegate::detail {

/// choose_order screens an order with a backend put first before timing its regions one by one:
/// its partition by the rules alone (the promoted backend takes every region it can) is built and
/// timed whole against the best so far, and an order slower beyond the spread there is not
/// refined. Only where refining would cost more than that one comparison of the method
/// (screens): where the promoted backend's distinct regions in that partition (region_key: alike
/// regions are timed once) are at least screen_min_regions and either hold at least
/// screen_min_share of its regions' nodes, since refining times each of them twice (against the
/// backend listed before it, against TorchScript), or are at least screen_many_regions, since
/// each costs two lowerings alone and two rounds of timings however small it is. GoogLeNet's ten
/// inception blocks on xnnpack (100 % of the nodes) cost 18 s of a 47 s loaded lowering on an AVX2
/// machine, to lose to onednn's one region by 8 of 8 rounds; EfficientNet-B0's 29 distinct
/// one- and two-node regions on pointwise_fusion took 3.8 s of a 7.3 s idle lowering, its whole
/// model 1.6 s to compare; ConvNeXt-T's 11 distinct one- and two-node regions on xnnpack (12 %)
/// take 1 s to refine, and its whole model beside a busy process 14-18 s to compare.
inline constexpr std::size_t screen_min_regions = 2;
inline constexpr double screen_min_share = 0.5;
inline constexpr std::size_t screen_many_regions = 16;

/// Whether choose_order screens an order whose promoted backend has `distinct` distinct regions
/// holding `share` of the nodes in its partition by the rules alone.
inline bool screens(std::size_t distinct, double share) {
  return distinct >= screen_min_regions && (share >= screen_min_share || distinct >= screen_many_regions);
}

}  // namespace torch_delegate::detail

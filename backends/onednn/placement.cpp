// Where the values of a plan live in a call's one buffer (no LibTorch, no oneDNN: sizes and lives).
#include "steps.hpp"

#include <algorithm>
#include <utility>

namespace onednn_delegate {

buffer_layout lay_out_buffer(const std::vector<buffer_slot>& slots) {
  buffer_layout layout{std::vector<std::size_t>(slots.size(), 0), 0};
  const auto rounded = [&](std::size_t slot) { return (slots[slot].bytes + buffer_alignment - 1) / buffer_alignment * buffer_alignment; };
  std::vector<std::size_t> order;
  for (std::size_t slot = 0; slot < slots.size(); ++slot)
    if (slots[slot].bytes > 0) order.push_back(slot);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return slots[a].bytes > slots[b].bytes; });
  std::vector<std::size_t> placed;
  for (const std::size_t slot : order) {
    std::vector<std::pair<std::size_t, std::size_t>> busy;  // [begin, end) of the slots alive at the same time
    for (const std::size_t other : placed)
      if (!(slots[other].last_use < slots[slot].first_use || slots[slot].last_use < slots[other].first_use))
        busy.emplace_back(layout.offsets[other], layout.offsets[other] + rounded(other));
    std::sort(busy.begin(), busy.end());
    std::size_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + rounded(slot) <= begin) break;
      offset = std::max(offset, end);
    }
    layout.offsets[slot] = offset;
    layout.bytes = std::max(layout.bytes, offset + rounded(slot));
    placed.push_back(slot);
  }
  return layout;
}

}  // namespace onednn_delegate

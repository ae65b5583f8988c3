// A bounded plan-per-shape cache: the plans a backend made for the input shapes it was called with,
// the least recently used dropped when a new one would exceed the capacity. Thread-safe: calls of
// one lowered module may run concurrently, and a plan is made once per shape, under the cache's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace torch_delegate::toolkit {

/// The input shapes of a call: what a plan is made for.
using input_shapes = std::vector<std::vector<std::int64_t>>;

/// Plans keyed by input shapes, at most `capacity` of them, least recently used first out. A plan
/// is handed out as a shared_ptr: a call still running on an evicted plan keeps it alive.
template <class Plan, class Key = input_shapes>
class plan_cache {
 public:
  explicit plan_cache(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  std::size_t capacity() const { return capacity_; }
  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }

  /// The plan for `key`, made by `make()` when there is none (under the lock: one plan per key,
  /// and `make` may update state the cache's owner guards with it). Marks it most recently used;
  /// evicts the least recently used plan when the cache is full.
  std::shared_ptr<const Plan> get_or_make(const Key& key, const std::function<std::shared_ptr<const Plan>()>& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto entry = entries_.begin(); entry != entries_.end(); ++entry)
      if (entry->first == key) {
        entries_.splice(entries_.end(), entries_, entry);  // most recently used last
        return entries_.back().second;
      }
    std::shared_ptr<const Plan> made = make();
    if (entries_.size() == capacity_) entries_.pop_front();
    entries_.emplace_back(key, made);
    return made;
  }

  /// Whether a plan for `key` is cached (does not change the order of use).
  bool contains(const Key& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& entry : entries_)
      if (entry.first == key) return true;
    return false;
  }

  /// Calls `visit(key, plan)` for each cached plan, least recently used first, under the lock.
  template <class Visit>
  void for_each(Visit&& visit) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, plan] : entries_) visit(key, *plan);
  }

 private:
  std::size_t capacity_;
  mutable std::mutex mutex_;
  // A list, searched linearly: a handful of shapes per region, and a shape key (a few vectors)
  // compares faster than it hashes.
  std::list<std::pair<Key, std::shared_ptr<const Plan>>> entries_;
};

}  // namespace torch_delegate::toolkit

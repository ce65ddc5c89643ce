// transport/shm/fifo.h - the first-in first-out queue a shm connection keeps its posted sends and
// receives in: one array of a power-of-two size, indexed by two counters that only grow, so
// that push, front, pop and size are each a few instructions (std::deque keeps a map of nodes
// and checks a node's end at every push and pop). It doubles when full; a connection bounds it
// with its kMaxInFlight. Entries are plain values (pointers and counts), copied in and out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace braid::transport::shm {

template <typename T>
class Fifo {
  static_assert(std::is_trivially_copyable_v<T>, "entries are moved by plain copies when the array grows");

 public:
  explicit Fifo(size_t capacity = 16) : slots_(round_up(capacity)), mask_(slots_.size() - 1) {}

  bool empty() const { return head_ == tail_; }
  size_t size() const { return static_cast<size_t>(tail_ - head_); }
  T& front() { return slots_[head_ & mask_]; }
  const T& front() const { return slots_[head_ & mask_]; }
  // The i-th entry from the front (0: the front).
  const T& operator[](size_t i) const { return slots_[(head_ + i) & mask_]; }
  bool full() const { return size() > mask_; }  // the next push_back grows the array
  void push_back(const T& v) {
    if (full()) grow();
    slots_[tail_++ & mask_] = v;
  }
  void pop_front() { ++head_; }
  void clear() { head_ = tail_ = 0; }

 private:
  static size_t round_up(size_t n) {
    size_t p = 1;
    while (p < n) p <<= 1;
    return p;
  }
  [[gnu::noinline]] void grow() {
    std::vector<T> bigger(slots_.size() * 2);
    const size_t n = size();
    for (size_t i = 0; i < n; ++i) bigger[i] = (*this)[i];
    slots_.swap(bigger);
    mask_ = slots_.size() - 1;
    head_ = 0;
    tail_ = n;
  }

  std::vector<T> slots_;
  size_t mask_;
  uint64_t head_ = 0, tail_ = 0;
};

}  // namespace braid::transport::shm

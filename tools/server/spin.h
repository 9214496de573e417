// The bounded spin-then-block of dynvm-server's serving threads (--spin-us, docs/serving.md):
// a thread that just served a request looks for the next one without blocking for up to
// --spin-us before it blocks. On a virtual machine whose idle CPUs halt (no halt polling), a
// thread blocked on a socket takes tens of microseconds to wake for the next packet; a
// spinning one takes it at once, and a spinning thread keeps its CPU awake for the thread
// that does get the next request. The spin is bounded in time, yields the CPU between looks (a
// thread with work on this CPU runs first), happens only right after activity (an idle server
// blocks and burns nothing), and at most `max_spinners` threads spin at once: the ones that
// started last (the latest served is the likeliest to get the next request), a newer spinner
// sending the oldest to block.
//
// Thread safety: thread-safe.
#ifndef DYNVM_TOOLS_SERVER_SPIN_H_
#define DYNVM_TOOLS_SERVER_SPIN_H_

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace dynvm::server {

class SpinPolicy {
 public:
  // `spin_us` 0: never spin. `max_spinners` < 1 counts as 1.
  SpinPolicy(int64_t spin_us, int max_spinners)
      : window_(std::chrono::microseconds(spin_us < 0 ? 0 : spin_us)),
        max_spinners_(static_cast<uint64_t>(max_spinners < 1 ? 1 : max_spinners)) {}
  SpinPolicy(const SpinPolicy&) = delete;
  SpinPolicy& operator=(const SpinPolicy&) = delete;

  int64_t spin_us() const {
    return std::chrono::duration_cast<std::chrono::microseconds>(window_).count();
  }

  // Calls `ready` (a non-blocking look for the next request) until it returns true, the
  // window has passed, or `max_spinners` newer spins have started, yielding the CPU between
  // calls; true when `ready` did (the caller blocks otherwise). False at once when off.
  template <typename Ready>
  bool Spin(Ready&& ready) {
    if (window_.count() == 0) return false;
    const uint64_t ticket = started_.fetch_add(1, std::memory_order_relaxed) + 1;
    const auto end = std::chrono::steady_clock::now() + window_;
    for (;;) {
      if (ready()) return true;
      if (std::chrono::steady_clock::now() >= end ||
          started_.load(std::memory_order_relaxed) - ticket >= max_spinners_)
        return false;
      sched_yield();
    }
  }

 private:
  const std::chrono::steady_clock::duration window_;
  const uint64_t max_spinners_;
  std::atomic<uint64_t> started_{0};  // spins started so far
};

}  // namespace dynvm::server

#endif  // DYNVM_TOOLS_SERVER_SPIN_H_

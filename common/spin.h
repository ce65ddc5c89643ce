// common/spin.h - bounded spinning that knows when to give the CPU away.
//
// A waiter spins briefly before it sleeps because a wake-up costs ~40 us on these VMs. While it
// spins it either busy-waits (pause) or calls sched_yield(). Yielding is right only when other
// spinners need this CPU: then the thread it waits for may be one of them. Yielding to a thread
// that computes is wrong: the scheduler hands that thread a whole slice (~2 ms here) and the
// waiter's message sits unread meanwhile (bench/spin_cost.sh measured 1.9 ms per round trip for
// a waiter sharing its CPU with a compute thread, against 28 us without spinning). So a spinner
// yields only while this process has more spinning threads than CPUs it may run on, or when
// this node runs more ranks than it has CPUs (their spinners then share CPUs too; spinners of
// other processes are not visible here, so the rank count stands in for them). That is for
// waits on another host or process (a transport poll). A thread that waits for another thread
// of its own process must yield instead: that thread may be runnable on this very CPU.
#pragma once

namespace braid {

// Counts the calling thread as spinning for the scope's lifetime.
class SpinScope {
 public:
  SpinScope();
  ~SpinScope();
  SpinScope(const SpinScope&) = delete;
  SpinScope& operator=(const SpinScope&) = delete;

  // One pass of a spin loop: a pause instruction, or sched_yield() when this process's spinners
  // outnumber the CPUs the calling thread may run on (sched_getaffinity, read once per thread).
  void pause() const;
};

// Whether a wait on the calling thread may spin at all. A background thread (the runtime's
// progress thread) marks itself with spin_only_for_waiters(): it then spins only while some
// thread of this process waits for a result (inside a WaitScope). Otherwise the program is
// computing, and every microsecond spun is taken from it; sleeping in the kernel costs a
// context switch instead.
void spin_only_for_waiters();
bool spin_allowed();
class WaitScope {
 public:
  WaitScope();
  ~WaitScope();
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;
};

// Ranks on this node (LOCAL_WORLD_SIZE), told by the runtime: above the number of online CPUs
// every spinner yields. The largest value told is kept.
void set_ranks_on_node(int ranks);

// For tests: threads of this process inside a SpinScope now, the CPUs the caller may use, and
// how many times pause() has yielded in this process.
int spinning_threads();
int usable_cpus();
long spin_yields();

}  // namespace braid

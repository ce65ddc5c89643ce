// common/spin.h - bounded spinning that knows when to give the CPU away.
//
// A waiter spins briefly before it sleeps because a wake-up costs far more than a small
// message (docs/code_figures.md, "Spinning"). While it spins it either busy-waits (pause) or
// calls sched_yield(). Yielding is right only when other spinners need this CPU: then the thread
// it waits for may be one of them. Yielding to a thread that computes is wrong: the scheduler
// hands that thread a whole slice and the waiter's message sits unread meanwhile
// (bench/spin_cost.sh shows the cost). So a spinner
// yields only while this process has more spinning threads than CPUs it may run on, or when
// this node runs more ranks than it has CPUs (their spinners then share CPUs too; spinners of
// other processes are not visible here, so the rank count stands in for them). That is for
// waits on another host or process (a transport poll). A thread that waits for another thread
// of its own process must yield instead: that thread may be runnable on this very CPU.
//
// One case is known exactly rather than guessed: a peer process confined to the same single CPU
// as this one (the tcp transport learns it in its connection handshake and holds a
// SharedCpuPeer). The peer cannot answer while we hold its CPU, so a pausing spin only delays
// the answer by the whole spin. Yielding on each pass fixes that, and sleeping at once does as
// well or slightly better (a wake-up on the CPU we just gave away is cheap, and each spin pass
// costs a poll and a sched_yield; docs/code_figures.md has the figures). Sleeping is also safe
// when the peer computes instead of answering, where a yield would hand it a whole slice. So
// transport waits then do not spin at all.
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
  // outnumber the CPUs the calling thread may run on (sched_getaffinity, read once per thread),
  // the node is oversubscribed (set_ranks_on_node), or a SharedCpuPeer is held.
  void pause() const;
  // Whether pause() gives the CPU away now (sched_yield) rather than pausing on it.
  bool yields() const;
};

// Whether a transport wait (the engines' spin before they sleep in the kernel) may spin at all.
// A background thread (the runtime's progress thread) marks itself with
// spin_only_for_waiters(): its transport waits then spin only while some thread of this process
// waits for a result (inside a WaitScope). Otherwise the program is computing, and every
// microsecond spun is taken from it; sleeping in the kernel costs a context switch instead.
// No transport wait spins while a SharedCpuPeer is held. The runtime's own short waits for
// another thread of the process (its queue, Work::wait) do not ask: they always yield.
void spin_only_for_waiters();
bool spin_allowed();
class WaitScope {
 public:
  WaitScope();
  ~WaitScope();
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;
};

// Moves the calling thread off `cpu` to another CPU its affinity mask allows: the mask is narrowed
// to leave `cpu` out, which makes the kernel migrate the thread at once, and restored right
// after (the thread stays where it went). For a waiter that knows the thread it waits for is
// queued behind it on `cpu`. False, doing nothing, when the mask allows `cpu` only (or nothing
// else), or the kernel refuses.
bool step_off_cpu(int cpu);

// Ranks on this node (LOCAL_WORLD_SIZE), told by the runtime: above the number of online CPUs
// every spinner yields. Once a value above the CPU count has been told, it stays so.
void set_ranks_on_node(int ranks);

// Held while a peer process is confined to the same single CPU as this one (the tcp transport
// decides it per connection, transport/common/host_identity.h, and holds one for as long as the
// connection lives). While any is held, spin_allowed() is false and pause() yields. Which
// connection a wait is for is not known down here, so the rule is process-wide: a wait for
// another peer then sleeps at once too, which costs a wake-up, never a stolen CPU.
class SharedCpuPeer {
 public:
  SharedCpuPeer();
  ~SharedCpuPeer();
  SharedCpuPeer(const SharedCpuPeer&) = delete;
  SharedCpuPeer& operator=(const SharedCpuPeer&) = delete;
};

// For tests: threads of this process inside a SpinScope now, the CPUs the caller may use, and
// how many times pause() has yielded in this process, and the SharedCpuPeers held now.
int spinning_threads();
int usable_cpus();
long spin_yields();
int cpu_sharing_peers();

}  // namespace braid

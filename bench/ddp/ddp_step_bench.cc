// ddp_step_bench - how much of the gradient all_reduce DDP hides behind backward.
//
//   braidrun --nnodes 2 --node-rank i --rdzv-endpoint HOST:PORT --nproc-per-node 1
//       ddp_step_bench --layers 8 --hidden 512 --batch 512 --bucket-kib 1024
//
// The model is an MLP with --layers equal hidden layers (bench/ddp/deep_mlp.h; --layers 1
// --hidden 128 has the example's shape). The global batch is split evenly over the ranks. Four
// configurations are measured:
//   local       forward + backward + SGD, no communication;
//   all_reduce  a blocking all_reduce (f32 avg) of a buffer as large as the whole gradient;
//   ddp         the same step through the Reducer: buckets all_reduced while backward runs;
//   one bucket  the Reducer with one bucket, which starts only when backward has ended.
// This VM's speed drifts by up to 2x within minutes, so the configurations are interleaved:
// each of --rounds rounds runs --steps steps of every configuration (their order rotated per
// round), and medians are taken over all steps. Each step starts after a barrier, and its
// time is that of the slowest rank (all_reduce max after the step, untimed).
//
// The share of the all_reduce hidden behind backward:
//   hidden = (T_all_reduce + T_local - T_ddp) / T_all_reduce
// 1 when the step costs no more than without communication, 0 when DDP costs as much as a
// blocking all_reduce after backward, < 0 when it costs more. The first layer's gradient is
// ready only when backward ends, so at best its share of the all_reduce stays exposed; that
// bound is printed next to the result.
//
// CPU: each configuration's CPU time per step, of the whole process and of the thread running
// the step. What the ddp step uses beyond the local step is what communication costs in CPU;
// with one core per rank it comes out of compute. The all_reduce-alone figure understates it:
// kernel network work done while the CPU idles is charged to no process. The machine's
// interrupt and softirq time per step (/proc/stat, tick-sampled) shows that work's size.
#include <braid/braid.h>
#include <braid/ddp.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/ddp/deep_mlp.h"

namespace {

using braid::bench::DeepMlp;
using braid::bench::DeepMlpShape;
using Clock = std::chrono::steady_clock;

struct Flags {
  size_t layers = 8;
  size_t hidden = 512;
  size_t batch = 512;  // global: each rank takes batch / ranks samples
  size_t rounds = 5;
  size_t steps = 4;  // per configuration and round
  size_t first_bucket_kib = 1024;  // the Reducer's defaults: 1 MiB,
  size_t bucket_kib = 25 * 1024;   // then 25 MiB
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "ddp_step_bench: %s\n"
               "usage: ddp_step_bench [--layers L] [--hidden H] [--batch GLOBAL] [--rounds R] [--steps S]\n"
               "                      [--first-bucket-kib K] [--bucket-kib K]\n",
               why.c_str());
  std::exit(2);
}

Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage("missing value after " + a);
    char* end = nullptr;
    const size_t v = std::strtoull(argv[i + 1], &end, 10);
    if (*end != '\0' || v == 0) usage("bad value '" + std::string(argv[i + 1]) + "' for " + a);
    if (a == "--layers")
      f.layers = v;
    else if (a == "--hidden")
      f.hidden = v;
    else if (a == "--batch")
      f.batch = v;
    else if (a == "--rounds")
      f.rounds = v;
    else if (a == "--steps")
      f.steps = v;
    else if (a == "--first-bucket-kib")
      f.first_bucket_kib = v;
    else if (a == "--bucket-kib")
      f.bucket_kib = v;
    else
      usage("unknown flag " + a);
  }
  return f;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double cpu_ms(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// Time the whole machine spent in interrupts and softirqs (all CPUs), in ms. This kernel has no
// IRQ time accounting, so that work (TCP, and here the emulated link and switch) is also in the
// CPU time of whichever thread it interrupted. Counted in ticks of 1/CLK_TCK s: meaningful only
// as a mean over many steps.
double machine_irq_ms() {
  FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return 0;
  unsigned long long user = 0, nice = 0, sys = 0, idle = 0, iowait = 0, irq = 0, softirq = 0;
  const int n =
      std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &sys, &idle, &iowait, &irq, &softirq);
  std::fclose(f);
  if (n != 7) return 0;
  return static_cast<double>(irq + softirq) * 1e3 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// What one step took; for all_reduce, forward and backward stay 0. CPU times are of the whole
// process (cpu), of the thread that runs the step (step_thread_cpu), and the machine's
// interrupt and softirq time (irq; every rank on this machine and anything else running).
struct StepTimes {
  double step = 0, forward = 0, backward = 0, cpu = 0, step_thread_cpu = 0, irq = 0;
};

enum Config : size_t { kLocal, kAllReduce, kDdp, kOneBucket, kNumConfigs };
constexpr std::array<const char*, kNumConfigs> kConfigNames = {
    "local step (no communication)", "all_reduce of the gradient alone", "ddp step (overlapped)",
    "ddp step, one bucket (no overlap)"};

class StepBench {
 public:
  StepBench(braid::Communicator& comm, const Flags& f)
      : comm_(comm),
        local_batch_(f.batch / static_cast<size_t>(comm.size())),
        model_(DeepMlpShape{.inputs = 784, .hidden = f.hidden, .layers = f.layers, .classes = 10}, 1),
        x_(local_batch_ * 784),
        labels_(local_batch_),
        local_grads_(model_.num_params()),
        flat_(model_.total_count(), 0.0f) {
    uint64_t s = static_cast<uint64_t>(comm.rank()) + 1;  // each rank its own shard of the batch
    for (float& v : x_) v = static_cast<float>((s = s * 6364136223846793005ULL + 1) >> 40) * 0x1p-24f;
    for (size_t i = 0; i < labels_.size(); ++i) labels_[i] = static_cast<int32_t>(i % 10);
    for (size_t i = 0; i < model_.num_params(); ++i) local_grads_[i].resize(model_.param_count(i));
    std::vector<braid::ddp::Parameter> params;
    for (size_t i = 0; i < model_.num_params(); ++i) {
      params.push_back({model_.param(i), nullptr, model_.param_count(i)});
    }
    const braid::ddp::BucketOptions chosen{.first_bucket_bytes = f.first_bucket_kib << 10,
                                           .bucket_bytes = f.bucket_kib << 10};
    const braid::ddp::BucketOptions one{.first_bucket_bytes = size_t{1} << 40, .bucket_bytes = size_t{1} << 40};
    // Both Reducers drive the same weights; each broadcasts them from rank 0, which is harmless.
    ddp_ = std::make_unique<braid::ddp::Reducer>(comm, params, braid::ddp::ReducerOptions{.buckets = chosen});
    one_bucket_ = std::make_unique<braid::ddp::Reducer>(comm, params, braid::ddp::ReducerOptions{.buckets = one});
  }

  size_t local_batch() const { return local_batch_; }
  const DeepMlp& model() const { return model_; }
  size_t num_buckets() const { return ddp_->plan().buckets.size(); }

  // One step of `c`, timed on this rank, then maxed over the ranks.
  StepTimes run(Config c) {
    comm_.barrier();
    StepTimes t;
    const double cpu0 = cpu_ms(CLOCK_PROCESS_CPUTIME_ID);
    const double thread_cpu0 = cpu_ms(CLOCK_THREAD_CPUTIME_ID);
    const double irq0 = machine_irq_ms();
    const auto t0 = Clock::now();
    switch (c) {
      case kLocal:
        local_step(&t);
        break;
      case kAllReduce:
        comm_.all_reduce(flat_.data(), flat_.size(), braid::DType::f32, braid::Op::avg);
        break;
      case kDdp:
        reducer_step(*ddp_, &t);
        break;
      case kOneBucket:
        reducer_step(*one_bucket_, &t);
        break;
      case kNumConfigs:
        break;
    }
    t.step = ms_since(t0);
    t.cpu = cpu_ms(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
    t.step_thread_cpu = cpu_ms(CLOCK_THREAD_CPUTIME_ID) - thread_cpu0;
    t.irq = machine_irq_ms() - irq0;
    std::array<double, 6> v = {t.step, t.forward, t.backward, t.cpu, t.step_thread_cpu, t.irq};
    comm_.all_reduce(v.data(), v.size(), braid::DType::f64, braid::Op::max);
    return StepTimes{
        .step = v[0], .forward = v[1], .backward = v[2], .cpu = v[3], .step_thread_cpu = v[4], .irq = v[5]};
  }

 private:
  // The step does a training step's work, SGD included. What it costs does not depend on the
  // weights' values (backward skips no zeros); a small rate only keeps them sane over hundreds
  // of steps on one fixed batch.
  static constexpr float kLearningRate = 1e-4f;

  float scale() const { return 1.0f / static_cast<float>(local_batch_); }

  void local_step(StepTimes* t) {
    std::vector<float*> grads;
    for (auto& g : local_grads_) {
      std::fill(g.begin(), g.end(), 0.0f);
      grads.push_back(g.data());
    }
    compute(grads.data(), [](size_t) {}, t);
    model_.sgd_step(grads.data(), kLearningRate);
  }

  void reducer_step(braid::ddp::Reducer& reducer, StepTimes* t) {
    reducer.zero_grad();
    std::vector<float*> grads(model_.num_params());
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = reducer.grad(i);
    compute(grads.data(), [&](size_t i) { reducer.mark_ready(i); }, t);
    reducer.finalize();
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = reducer.grad(i);  // the first finalize may move them
    model_.sgd_step(grads.data(), kLearningRate);
  }

  void compute(float* const* grads, const std::function<void(size_t)>& ready, StepTimes* t) {
    const auto t0 = Clock::now();
    model_.forward(x_.data(), labels_.data(), local_batch_, scale());
    t->forward = ms_since(t0);
    const auto t1 = Clock::now();
    model_.backward(grads, ready);
    t->backward = ms_since(t1);
  }

  braid::Communicator& comm_;
  size_t local_batch_;
  DeepMlp model_;
  std::vector<float> x_;
  std::vector<int32_t> labels_;
  std::vector<std::vector<float>> local_grads_;
  std::vector<float> flat_;  // stands for the whole gradient in the all_reduce-alone config
  std::unique_ptr<braid::ddp::Reducer> ddp_;
  std::unique_ptr<braid::ddp::Reducer> one_bucket_;
};

double hidden_share(double all_reduce, double local, double ddp) {
  return all_reduce > 0 ? (all_reduce + local - ddp) / all_reduce : 0;
}

// Every step of every configuration, as measured (slowest rank), and the round structure.
struct Results {
  std::array<std::vector<StepTimes>, kNumConfigs> steps;
  std::vector<std::array<double, kNumConfigs>> round_step_medians;

  double median_of(Config c, double StepTimes::*field) const {
    std::vector<double> v;
    for (const StepTimes& t : steps[c]) v.push_back(t.*field);
    return median(v);
  }
  double mean_of(Config c, double StepTimes::*field) const {
    double sum = 0;
    for (const StepTimes& t : steps[c]) sum += t.*field;
    return steps[c].empty() ? 0 : sum / static_cast<double>(steps[c].size());
  }
};

Results measure(StepBench& bench, const Flags& f) {
  // Untimed: the first Reducer step plans the buckets again from the order gradients arrived.
  for (size_t c = 0; c < kNumConfigs; ++c) bench.run(static_cast<Config>(c));
  Results res;
  for (size_t r = 0; r < f.rounds; ++r) {
    std::array<double, kNumConfigs> round{};
    for (size_t k = 0; k < kNumConfigs; ++k) {
      const auto c = static_cast<Config>((k + r) % kNumConfigs);  // rotated: none always follows the same one
      std::vector<double> times;
      for (size_t s = 0; s < f.steps; ++s) {
        res.steps[c].push_back(bench.run(c));
        times.push_back(res.steps[c].back().step);
      }
      round[c] = median(times);
    }
    res.round_step_medians.push_back(round);
  }
  return res;
}

void report(const Results& res, const StepBench& bench, const Flags& f, size_t ranks) {
  const DeepMlp& m = bench.model();
  const size_t total = m.total_count();
  std::printf("%zu ranks; MLP 784-%zux%zu-10: %zu f32 parameters (%.2f MiB); global batch %zu (%zu per rank)\n", ranks,
              f.hidden, f.layers, total, static_cast<double>(total) * 4 / (1 << 20), f.batch, bench.local_batch());
  std::printf("ddp buckets: first %zu KiB, then %zu KiB -> %zu buckets; %zu rounds x %zu steps per configuration;"
              " slowest rank, medians over all steps\n",
              f.first_bucket_kib, f.bucket_kib, bench.num_buckets(), f.rounds, f.steps);
  std::printf("| configuration | step ms | forward ms | backward ms | CPU ms, all threads | CPU ms, step thread |"
              " irq+softirq ms, machine (mean) |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (size_t c = 0; c < kNumConfigs; ++c) {
    const auto cfg = static_cast<Config>(c);
    char phases[64] = "| | |";  // all_reduce has no forward or backward
    if (cfg != kAllReduce) {
      std::snprintf(phases, sizeof phases, "| %.2f | %.2f |", res.median_of(cfg, &StepTimes::forward),
                    res.median_of(cfg, &StepTimes::backward));
    }
    std::printf("| %s | %.2f %s %.2f | %.2f | %.1f |\n", kConfigNames[c], res.median_of(cfg, &StepTimes::step), phases,
                res.median_of(cfg, &StepTimes::cpu), res.median_of(cfg, &StepTimes::step_thread_cpu),
                res.mean_of(cfg, &StepTimes::irq));
  }
  // The local step is pure compute on one thread: when it took much longer than the CPU it
  // used, something else (another rank on the same CPU, another program) ran in between.
  const double local_wall = res.median_of(kLocal, &StepTimes::step);
  const double local_cpu = res.median_of(kLocal, &StepTimes::step_thread_cpu);
  if (local_wall > 1.15 * local_cpu) {
    std::printf("note: the local step took %.0f ms but used %.0f ms of CPU: this rank shared its CPU (more ranks than"
                " CPUs, or other programs), so these figures measure that sharing\n",
                local_wall, local_cpu);
  }
  if (ranks == 1) {
    std::printf("(one rank: nothing to communicate, so no hidden share)\n");
    return;
  }
  const double all_reduce = res.median_of(kAllReduce, &StepTimes::step);
  const double local = res.median_of(kLocal, &StepTimes::step);
  const double ddp = res.median_of(kDdp, &StepTimes::step);
  const double backward = res.median_of(kLocal, &StepTimes::backward);
  std::printf("per round, step ms (local / all_reduce / ddp / one bucket -> hidden):");
  std::vector<double> round_hidden;
  for (const auto& rm : res.round_step_medians) {
    round_hidden.push_back(hidden_share(rm[kAllReduce], rm[kLocal], rm[kDdp]));
    std::printf(" [%.1f / %.1f / %.1f / %.1f -> %.0f%%]", rm[kLocal], rm[kAllReduce], rm[kDdp], rm[kOneBucket],
                100 * round_hidden.back());
  }
  std::printf("\nall_reduce %.2f ms %s backward %.2f ms (local step)\n", all_reduce,
              all_reduce <= backward ? "<=" : ">", backward);
  std::printf("hidden share of the all_reduce: %.0f%% from the medians, %.0f%% median of rounds"
              " (one bucket, for reference: %.0f%%)\n",
              100 * hidden_share(all_reduce, local, ddp), 100 * median(round_hidden),
              100 * hidden_share(all_reduce, local, res.median_of(kOneBucket, &StepTimes::step)));
  const double late = static_cast<double>(m.first_layer_count()) / static_cast<double>(total);
  std::printf("bound: the first layer's gradient (%.1f%%) is ready only when backward ends, so about %.0f%% at most"
              " can hide\n",
              100 * late, 100 * (1 - late));
  // Where the exposed time goes. Other threads: braid's progress thread. The step thread's
  // extra CPU: the Reducer's calls, cache misses, and the kernel's network work (TCP, and here
  // the emulated link and switch), which without IRQ time accounting is charged to whichever
  // thread it interrupted: the compute thread, when it overlaps.
  const double other_threads = res.median_of(kDdp, &StepTimes::cpu) - res.median_of(kDdp, &StepTimes::step_thread_cpu);
  const double step_thread_extra =
      res.median_of(kDdp, &StepTimes::step_thread_cpu) - res.median_of(kLocal, &StepTimes::step_thread_cpu);
  std::printf("ddp step exposed %.2f ms over the local step; CPU it used beyond the local step: %.2f ms"
              " (other threads %.2f, step thread +%.2f); machine irq+softirq +%.1f ms/step, all ranks together\n",
              ddp - local, other_threads + step_thread_extra, other_threads, step_thread_extra,
              res.mean_of(kDdp, &StepTimes::irq) - res.mean_of(kLocal, &StepTimes::irq));
}

int run(const Flags& f) {
  braid::Communicator comm = braid::Communicator::from_env();
  const auto ranks = static_cast<size_t>(comm.size());
  if (f.batch % ranks != 0) {
    usage("--batch " + std::to_string(f.batch) + " does not split over " + std::to_string(ranks) + " ranks");
  }
  StepBench bench(comm, f);
  const Results res = measure(bench, f);
  if (comm.rank() == 0) report(res, bench, f, ranks);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse_flags(argc, argv);
  try {
    return run(f);
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "ddp_step_bench: %s\n", e.what());
    return 1;
  }
}

// cuda_reduce_into against the host kernel reduce_into (itself checked against the scalar
// reference in reduce_test.cc): every dtype x op, counts 0, 1, odd and large, each on a
// stream the test creates. Results are copied back and compared element by element with the
// host's result on the same inputs, bit for bit except that any NaN equals any NaN.
//
// What the inputs are built to catch: random bits in integers and random floats with
// inf/NaN now and then (a wrong op, a wrong width or signedness, a missing NaN rule); odd
// counts (the elements left after the 16-byte vectors); counts above the 4096 x 256 threads
// of one grid (a missed grid-stride pass); guard bytes around dst (a write past either end);
// element- and byte-offset pointers (the kernel's three ways of loading).
//
// Skipped, naming the reason, where no CUDA device can be used (CI). scripts/gpu_check.sh
// runs it on a machine with a GPU.
#include "collectives/kernels/cuda/reduce_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "collectives/kernels/reduce.h"
#include "tests/collectives/kernels/reference.h"

namespace braid::collectives {
namespace {

// 64 Mi elements (256 MiB of f32); kMid and kOdd are above and below the 2^20 threads of one
// full grid, so the large counts take several grid-stride passes on every path.
constexpr size_t kLarge = size_t{64} << 20;
constexpr size_t kMid = (size_t{4} << 20) + 5;
constexpr size_t kOdd = 1000003;
// Bytes of sentinel on each side of dst and src; a multiple of 256 keeps cudaMalloc's alignment.
constexpr size_t kGuard = 256;
constexpr uint8_t kDstGuard = 0xA5;
constexpr uint8_t kSrcGuard = 0x3C;

std::string describe(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }

// Why no CUDA device can be used here, or "" when one can.
std::string why_no_device() {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess) return "cudaGetDeviceCount failed with " + describe(e) + ": no usable CUDA driver or device";
  if (devices == 0) return "cudaGetDeviceCount found 0 CUDA devices";
  return "";
}

// Owners of device memory and a stream; copying is deleted, as for every CUDA resource here.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { error_ = cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes); }
  ~DeviceBuffer() { if (ptr_ != nullptr) cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint8_t* data() const { return static_cast<uint8_t*>(ptr_); }
  cudaError_t error() const { return error_; }

 private:
  void* ptr_ = nullptr;
  cudaError_t error_ = cudaSuccess;
};

class Stream {
 public:
  // Non-blocking: no implicit ordering with the legacy default stream, so work that landed
  // there instead of on this stream would race with the copies and show.
  Stream() { error_ = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); }
  ~Stream() { if (stream_ != nullptr) cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  cudaError_t error() const { return error_; }

 private:
  cudaStream_t stream_ = nullptr;
  cudaError_t error_ = cudaSuccess;
};

class CudaReduce : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = why_no_device();
    if (!why.empty()) GTEST_SKIP() << "no CUDA device, device kernels not run: " << why;
    stream_ = std::make_unique<Stream>();
    ASSERT_EQ(stream_->error(), cudaSuccess) << describe(stream_->error());
  }
  cudaStream_t stream() const { return stream_->get(); }

 private:
  std::unique_ptr<Stream> stream_;
};

// Where dst and src sit: cudaMalloc'd (256-byte aligned, the vector path), one element in
// (element-aligned only), at odd byte offsets (neither), or the same buffer (dst == src).
enum class Layout { aligned, element_offset, byte_offset, same_buffer };
const char* to_string(Layout l) {
  switch (l) {
    case Layout::aligned: return "aligned";
    case Layout::element_offset: return "element_offset";
    case Layout::byte_offset: return "byte_offset";
    case Layout::same_buffer: return "same_buffer";
  }
  return "?";
}

struct Case {
  Layout layout;
  size_t count;
};
constexpr Case kCases[] = {
    {Layout::aligned, 0},          {Layout::aligned, 1},           {Layout::aligned, kOdd},
    {Layout::aligned, kLarge},     {Layout::element_offset, 1},    {Layout::element_offset, kOdd},
    {Layout::element_offset, kMid}, {Layout::byte_offset, 1},      {Layout::byte_offset, kOdd},
    {Layout::byte_offset, kMid},   {Layout::same_buffer, kOdd},
};

// Random inputs for kLarge elements of one dtype, made once and shared by that dtype's ops
// (the sweep runs them in a row); smaller counts use a prefix.
struct Inputs {
  std::vector<uint8_t> a, b;
};
const Inputs& inputs_for(DType dtype) {
  static Inputs inputs;
  static int cached = -1;
  if (cached != static_cast<int>(dtype)) {
    std::mt19937_64 rng(0x5eed0000u + static_cast<uint64_t>(dtype));
    inputs.a = reference::random_values(dtype, Op::sum, kLarge, rng);
    inputs.b = reference::random_values(dtype, Op::sum, kLarge, rng);
    cached = static_cast<int>(dtype);
  }
  return inputs;
}

// A device buffer laid out as [kGuard guard bytes][offset guard bytes][payload][kGuard guard
// bytes], and its host image: filled with the guard byte, the payload copied in, sent whole
// and read back whole, so that a write outside the payload shows in the image.
class Placed {
 public:
  Placed(const uint8_t* payload, size_t bytes, size_t offset, uint8_t guard)
      : buffer_(bytes + offset + 2 * kGuard), bytes_(bytes), offset_(offset), guard_(guard),
        image_(bytes + offset + 2 * kGuard, guard) {
    std::copy_n(payload, bytes, image_.begin() + static_cast<ptrdiff_t>(kGuard + offset));
  }
  cudaError_t error() const { return buffer_.error(); }
  uint8_t* device_payload() const { return buffer_.data() + kGuard + offset_; }
  const uint8_t* host_payload() const { return image_.data() + kGuard + offset_; }
  cudaError_t send(cudaStream_t s) {
    return cudaMemcpyAsync(buffer_.data(), image_.data(), image_.size(), cudaMemcpyHostToDevice, s);
  }
  cudaError_t fetch(cudaStream_t s) {
    return cudaMemcpyAsync(image_.data(), buffer_.data(), image_.size(), cudaMemcpyDeviceToHost, s);
  }
  // "" when every byte in front of and behind the payload still holds the guard byte.
  std::string written_outside(const char* name) const {
    const size_t begin = kGuard + offset_, end = begin + bytes_;
    for (auto [from, to] : {std::pair{size_t{0}, begin}, std::pair{end, image_.size()}}) {
      for (size_t i = from; i < to; ++i) {
        if (image_[i] != guard_) {
          return std::string(name) + " was written outside its elements, at byte " + std::to_string(i) + " of the buffer";
        }
      }
    }
    return "";
  }

 private:
  DeviceBuffer buffer_;
  size_t bytes_;
  size_t offset_;
  uint8_t guard_;
  std::vector<uint8_t> image_;
};

class CudaReduceSweep : public CudaReduce, public ::testing::WithParamInterface<std::tuple<DType, Op>> {};

TEST_P(CudaReduceSweep, MatchesHostKernel) {
  const auto [dtype, op] = GetParam();
  const size_t es = dtype_size(dtype);
  const Inputs& in = inputs_for(dtype);
  for (const Case& c : kCases) {
    SCOPED_TRACE(std::string(to_string(c.layout)) + ", count " + std::to_string(c.count));
    const size_t bytes = c.count * es;
    const bool same = c.layout == Layout::same_buffer;
    // The host's answer on the same inputs; with dst == src both operands are a.
    std::vector<uint8_t> want(in.a.begin(), in.a.begin() + static_cast<ptrdiff_t>(bytes));
    reduce_into(want.data(), same ? in.a.data() : in.b.data(), c.count, dtype, op);

    const size_t dst_offset = c.layout == Layout::element_offset ? es : c.layout == Layout::byte_offset ? 1 : 0;
    const size_t src_offset = c.layout == Layout::element_offset ? es : c.layout == Layout::byte_offset ? 3 : 0;
    Placed dst(in.a.data(), bytes, dst_offset, kDstGuard);
    Placed src(in.b.data(), bytes, src_offset, kSrcGuard);
    ASSERT_EQ(dst.error(), cudaSuccess) << describe(dst.error());
    ASSERT_EQ(src.error(), cudaSuccess) << describe(src.error());

    cudaStream_t s = stream();
    ASSERT_EQ(dst.send(s), cudaSuccess);
    ASSERT_EQ(src.send(s), cudaSuccess);
    const int rc = cuda_reduce_into(dst.device_payload(), same ? dst.device_payload() : src.device_payload(), c.count,
                                    dtype, op, s);
    ASSERT_EQ(rc, 0) << describe(static_cast<cudaError_t>(rc));
    ASSERT_EQ(dst.fetch(s), cudaSuccess);
    ASSERT_EQ(src.fetch(s), cudaSuccess);
    const cudaError_t done = cudaStreamSynchronize(s);
    ASSERT_EQ(done, cudaSuccess) << describe(done);

    const std::string diff = reference::first_difference(dtype, want.data(), dst.host_payload(), c.count);
    ASSERT_TRUE(diff.empty()) << diff;
    ASSERT_TRUE(std::equal(in.b.begin(), in.b.begin() + static_cast<ptrdiff_t>(bytes), src.host_payload()))
        << "src was modified";
    for (const std::string& outside : {dst.written_outside("dst"), src.written_outside("src")}) {
      ASSERT_TRUE(outside.empty()) << outside;
    }
  }
}

// Every op the host kernels take for a dtype: bitwise ops only on integers.
std::vector<std::tuple<DType, Op>> sweep() {
  std::vector<std::tuple<DType, Op>> out;
  for (int d = 0; d < kNumDTypes; ++d) {
    for (int o = 0; o < kNumOps; ++o) {
      if (is_floating(static_cast<DType>(d)) && is_bitwise(static_cast<Op>(o))) continue;
      out.emplace_back(static_cast<DType>(d), static_cast<Op>(o));
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllDTypesAndOps, CudaReduceSweep, ::testing::ValuesIn(sweep()),
                         [](const ::testing::TestParamInfo<CudaReduceSweep::ParamType>& info) {
                           return std::string(braid::to_string(std::get<0>(info.param))) + "_" +
                                  braid::to_string(std::get<1>(info.param));
                         });

// Bitwise ops on floating dtypes, and values outside the enums, are refused before anything
// is launched - for any count - and leave dst as it was.
TEST_F(CudaReduce, RejectsWhatTheHostContractForbids) {
  constexpr size_t kCount = 1000;
  DeviceBuffer dst(kCount * 8), src(kCount * 8);
  ASSERT_EQ(dst.error(), cudaSuccess);
  ASSERT_EQ(src.error(), cudaSuccess);
  const std::vector<uint8_t> before(kCount * 8, 0x11);
  ASSERT_EQ(cudaMemcpy(dst.data(), before.data(), before.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(src.data(), before.data(), before.size(), cudaMemcpyHostToDevice), cudaSuccess);
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (Op op : {Op::band, Op::bor, Op::bxor}) {
      for (size_t count : {size_t{0}, kCount}) {
        EXPECT_EQ(cuda_reduce_into(dst.data(), src.data(), count, dtype, op, stream()), static_cast<int>(cudaErrorInvalidValue))
            << to_string(dtype) << " " << to_string(op) << " count " << count;
      }
    }
  }
  EXPECT_EQ(cuda_reduce_into(dst.data(), src.data(), kCount, static_cast<DType>(kNumDTypes), Op::sum, stream()),
            static_cast<int>(cudaErrorInvalidValue));
  EXPECT_EQ(cuda_reduce_into(dst.data(), src.data(), kCount, DType::i32, static_cast<Op>(kNumOps), stream()),
            static_cast<int>(cudaErrorInvalidValue));
  EXPECT_EQ(cuda_reduce_into(dst.data(), src.data(), 0, DType::i32, static_cast<Op>(kNumOps), stream()),
            static_cast<int>(cudaErrorInvalidValue));
  ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
  std::vector<uint8_t> after(before.size());
  ASSERT_EQ(cudaMemcpy(after.data(), dst.data(), after.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(after, before);
}

// The kernel is launched on the caller's stream and nowhere else: captured into a graph from
// that stream it is the graph's only node (a launch on another stream would be missing from
// the graph, and one on the legacy stream would break the capture), and a count of 0 adds none.
TEST_F(CudaReduce, LaunchesOnTheCallersStreamOnly) {
  constexpr size_t kCount = 4099;
  const std::vector<float> twos(kCount, 2.0f), threes(kCount, 3.0f);
  DeviceBuffer dst(kCount * sizeof(float)), src(kCount * sizeof(float));
  ASSERT_EQ(cudaMemcpy(dst.data(), twos.data(), kCount * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(src.data(), threes.data(), kCount * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  for (size_t count : {size_t{0}, kCount}) {
    SCOPED_TRACE("count " + std::to_string(count));
    ASSERT_EQ(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeGlobal), cudaSuccess);
    const int rc = cuda_reduce_into(dst.data(), src.data(), count, DType::f32, Op::prod, stream());
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream(), &graph);
    ASSERT_EQ(rc, 0) << describe(static_cast<cudaError_t>(rc));
    ASSERT_EQ(ended, cudaSuccess) << describe(ended);
    size_t nodes = 0;
    ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
    EXPECT_EQ(nodes, count == 0 ? 0u : 1u);
    if (nodes == 1) {
      cudaGraphNode_t node;
      cudaGraphNodeType type;
      ASSERT_EQ(cudaGraphGetNodes(graph, &node, &nodes), cudaSuccess);
      ASSERT_EQ(cudaGraphNodeGetType(node, &type), cudaSuccess);
      EXPECT_EQ(type, cudaGraphNodeTypeKernel);
    }
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream()), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  std::vector<float> got(kCount);
  ASSERT_EQ(cudaMemcpy(got.data(), dst.data(), kCount * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, std::vector<float>(kCount, 6.0f));
}

}  // namespace
}  // namespace braid::collectives

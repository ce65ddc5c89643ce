// The example's own parts: the MLP's backward pass against finite differences, and the IDX
// reader on a file written here (and on the real Fashion-MNIST files when installed).
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/ddp/synthetic.h"
#include "tools/examples/idx_reader.h"
#include "tools/examples/mlp.h"
#include "tools/examples/train_progress.h"

namespace braid::examples {
namespace {

TEST(Mlp, GradientsMatchFiniteDifferences) {
  const MlpShape shape = ddp::testing::small_shape(6);
  Mlp mlp(shape, 3);
  const size_t n = 5;
  ddp::testing::Samples data = ddp::testing::make_samples(100, n, shape);
  std::vector<std::vector<float>> g(Mlp::kNumParams);
  float* grads[Mlp::kNumParams];
  for (size_t i = 0; i < Mlp::kNumParams; ++i) {
    g[i].assign(mlp.param_count(i), 0.0f);
    grads[i] = g[i].data();
  }
  std::vector<size_t> order;
  mlp.train_batch(data.x.data(), data.y.data(), n, 1.0f / n, grads, [&](size_t i) { order.push_back(i); });
  EXPECT_EQ(order, (std::vector<size_t>{Mlp::kW2, Mlp::kB2, Mlp::kW1, Mlp::kB1}));  // last layer first

  auto mean_loss = [&] { return mlp.evaluate(data.x.data(), data.y.data(), n).loss_sum / n; };
  const float h = 1e-2f;
  size_t checked = 0;
  for (size_t p = 0; p < Mlp::kNumParams; ++p) {
    for (size_t k = 0; k < mlp.param_count(p); k += 3) {
      float& w = mlp.param(p)[k];
      const float saved = w;
      w = saved + h;
      const double up = mean_loss();
      w = saved - h;
      const double down = mean_loss();
      w = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(g[p][k], numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << "param " << p << " element " << k;
      ++checked;
    }
  }
  EXPECT_GT(checked, 30u);
}

TEST(Mlp, SgdLowersTheLoss) {
  const MlpShape shape = ddp::testing::small_shape();
  Mlp mlp(shape, 1);
  ddp::testing::Samples data = ddp::testing::make_samples(0, 64, shape);
  const double before = mlp.evaluate(data.x.data(), data.y.data(), 64).loss_sum;
  std::vector<std::vector<float>> g(Mlp::kNumParams);
  for (int step = 0; step < 50; ++step) {
    float* grads[Mlp::kNumParams];
    for (size_t i = 0; i < Mlp::kNumParams; ++i) {
      g[i].assign(mlp.param_count(i), 0.0f);
      grads[i] = g[i].data();
    }
    mlp.train_batch(data.x.data(), data.y.data(), 64, 1.0f / 64, grads, [](size_t) {});
    mlp.sgd_step(grads, 0.5f);
  }
  EXPECT_LT(mlp.evaluate(data.x.data(), data.y.data(), 64).loss_sum, 0.7 * before);
}

void write_gz(const std::string& path, const std::vector<unsigned char>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

TEST(IdxReader, ReadsImagesAndLabels) {
  const std::string images = "/tmp/braid-idx-test-" + std::to_string(getpid()) + "-images.gz";
  const std::string labels = "/tmp/braid-idx-test-" + std::to_string(getpid()) + "-labels.gz";
  // Two 2x3 images, then three labels.
  write_gz(images, {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3, 0, 51, 102, 153, 204, 255, 255, 0, 0, 0, 0, 0});
  write_gz(labels, {0, 0, 8, 1, 0, 0, 0, 3, 7, 0, 9});
  Images img = read_idx_images(images);
  EXPECT_EQ(img.count, 2u);
  EXPECT_EQ(img.rows, 2u);
  EXPECT_EQ(img.cols, 3u);
  ASSERT_EQ(img.pixels.size(), 12u);
  EXPECT_FLOAT_EQ(img.pixels[1], 0.2f);
  EXPECT_FLOAT_EQ(img.pixels[5], 1.0f);
  EXPECT_EQ(read_idx_labels(labels), (std::vector<int32_t>{7, 0, 9}));
  EXPECT_THROW(read_idx_labels(images), std::runtime_error);  // wrong magic
  write_gz(labels, {0, 0, 8, 1, 0, 0, 0, 9, 1});              // says 9, holds 1
  EXPECT_THROW(read_idx_labels(labels), std::runtime_error);
  EXPECT_THROW(read_idx_images("/nonexistent/braid.gz"), std::runtime_error);
  std::remove(images.c_str());
  std::remove(labels.c_str());
}

TEST(IdxReader, FashionMnistWhenInstalled) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  if (access((dir + "t10k-labels-idx1-ubyte.gz").c_str(), R_OK) != 0) {
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  }
  Images img = read_idx_images(dir + "t10k-images-idx3-ubyte.gz");
  EXPECT_EQ(img.count, 10000u);
  EXPECT_EQ(img.rows * img.cols, 784u);
  std::vector<int32_t> labels = read_idx_labels(dir + "t10k-labels-idx1-ubyte.gz");
  ASSERT_EQ(labels.size(), 10000u);
  for (int32_t y : labels) ASSERT_TRUE(y >= 0 && y < 10);
}

// What a log file or braidrun's pipe gets from a 3-epoch run: one line per epoch with the time
// since the start and the time left at the pace so far, and nothing from the steps in between.
std::string progress_output(bool bar) {
  std::FILE* f = std::tmpfile();
  using Clock = TrainProgress::Clock;
  const Clock::time_point t0{};
  TrainProgress p(f, bar, 3, t0);
  for (int epoch = 0; epoch < 3; ++epoch) {
    const auto epoch_start = t0 + std::chrono::seconds(10 * epoch);
    for (size_t s = 1; s <= 4; ++s) p.step(epoch, s, 4, epoch_start + std::chrono::seconds(2 * s));
    p.end_epoch(epoch, "train loss 0.5", epoch_start + std::chrono::seconds(10));
  }
  std::string out;
  std::rewind(f);
  for (int c; (c = std::fgetc(f)) != EOF;) out += static_cast<char>(c);
  std::fclose(f);
  return out;
}

TEST(TrainProgress, OneLinePerEpochWithElapsedAndTimeLeftWhenNotATerminal) {
  EXPECT_EQ(progress_output(false),
            "epoch 1/3: train loss 0.5 | elapsed 10.0 s, about 20.0 s left\n"
            "epoch 2/3: train loss 0.5 | elapsed 20.0 s, about 10.0 s left\n"
            "epoch 3/3: train loss 0.5 | elapsed 30.0 s, done\n");
}

TEST(TrainProgress, OnATerminalABarWithinTheEpochIsClearedBeforeEachEpochLine) {
  const std::string out = progress_output(true);
  EXPECT_NE(out.find("\r\033[Kepoch 1/3 [" + std::string(10, '=') + std::string(10, ' ') + "]  50% 2/4 steps, 4.0 s, "
                     "about 4.0 s left"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("\r\033[Kepoch 1/3: train loss 0.5 | elapsed 10.0 s, about 20.0 s left\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("\r\033[Kepoch 3/3: train loss 0.5 | elapsed 30.0 s, done\n"), std::string::npos) << out;
}

TEST(TrainProgress, SpansReadAsPeopleSayThem) {
  EXPECT_EQ(TrainProgress::format_span(4.25), "4.2 s");
  EXPECT_EQ(TrainProgress::format_span(245), "4 min 05 s");
  EXPECT_EQ(TrainProgress::format_span(3720), "1 h 02 min");
  EXPECT_EQ(TrainProgress::format_span(-1), "0.0 s");
}

}  // namespace
}  // namespace braid::examples

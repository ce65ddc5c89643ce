// The training examples print one line per epoch: "epoch i/n: train loss L acc A% | test loss L
// acc A% | ...". Their tests read those lines back and compare runs with each other.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace braid::ddp {

struct Epoch {
  double train_loss, train_acc, test_loss, test_acc;
};

// Every epoch line in `out`, in order.
inline std::vector<Epoch> epochs(const std::string& out) {
  std::vector<Epoch> result;
  size_t pos = 0;
  while ((pos = out.find("epoch ", pos)) != std::string::npos) {
    Epoch e{};
    int i = 0, n = 0;
    if (std::sscanf(out.c_str() + pos, "epoch %d/%d: train loss %lf acc %lf%% | test loss %lf acc %lf%%", &i, &n,
                    &e.train_loss, &e.train_acc, &e.test_loss, &e.test_acc) == 6) {
      result.push_back(e);
    }
    pos += 6;
  }
  return result;
}

// Summation order differs between one process and several, so allow rounding noise.
inline void expect_close(const std::vector<Epoch>& got, const std::vector<Epoch>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i].train_loss, want[i].train_loss, 2e-3) << what << " epoch " << i + 1;
    EXPECT_NEAR(got[i].test_loss, want[i].test_loss, 2e-3) << what << " epoch " << i + 1;
    EXPECT_NEAR(got[i].train_acc, want[i].train_acc, 0.5) << what << " epoch " << i + 1;
    EXPECT_NEAR(got[i].test_acc, want[i].test_acc, 0.5) << what << " epoch " << i + 1;
  }
}

}  // namespace braid::ddp

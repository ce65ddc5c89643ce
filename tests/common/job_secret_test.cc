#include "common/job_secret.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace braid::auth {
namespace {

JobSecret secret_of(const std::string& text) {
  auto s = JobSecret::from_text(text, "test");
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.value();
}

TEST(JobSecret, ProofVerifiesOnlyForTheSameSecretNoncesDirectionAndTranscript) {
  JobSecret a = secret_of("0123456789abcdef-one");
  JobSecret same = secret_of("  0123456789abcdef-one\n");  // whitespace around it is not part of it
  JobSecret other = secret_of("0123456789abcdef-two");
  Nonce na = fresh_nonce(), nb = fresh_nonce();
  ASSERT_NE(na, nb);
  // B proves itself to A: prove(to_acceptor, A's nonce, B's nonce); A verifies with its own first.
  Mac mac = same.prove(Direction::to_acceptor, na, nb, "store");
  EXPECT_TRUE(a.verify(Direction::to_acceptor, na, nb, "store", mac));
  EXPECT_FALSE(other.verify(Direction::to_acceptor, na, nb, "store", mac));
  EXPECT_FALSE(a.verify(Direction::to_connector, na, nb, "store", mac));   // reflected
  EXPECT_FALSE(a.verify(Direction::to_acceptor, nb, na, "store", mac));    // nonces swapped
  EXPECT_FALSE(a.verify(Direction::to_acceptor, na, fresh_nonce(), "store", mac));  // replayed
  EXPECT_FALSE(a.verify(Direction::to_acceptor, na, nb, "comm 1 rank 0 -> 1", mac));
  Mac flipped = mac;
  flipped[7] ^= 1;
  EXPECT_FALSE(a.verify(Direction::to_acceptor, na, nb, "store", flipped));
}

TEST(JobSecret, NoSecretIsItsOwnKeyThatASecretDoesNotMatch) {
  JobSecret none;
  EXPECT_FALSE(none.present());
  EXPECT_EQ(none.source(), "none");
  JobSecret some = secret_of("0123456789abcdef");
  Nonce na = fresh_nonce(), nb = fresh_nonce();
  EXPECT_TRUE(JobSecret().verify(Direction::to_connector, na, nb, "x", none.prove(Direction::to_connector, na, nb, "x")));
  EXPECT_FALSE(some.verify(Direction::to_connector, na, nb, "x", none.prove(Direction::to_connector, na, nb, "x")));
}

TEST(JobSecret, ShortSecretsAreRefused) {
  auto s = JobSecret::from_text("short", "BRAID_SECRET");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("at least 16"), std::string::npos) << s.status().message();
}

TEST(JobSecret, FileMustBeReadableByItsOwnerOnly) {
  char path[] = "/tmp/braid_secret_test_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  { std::ofstream(path) << "an-ample-secret-of-the-job\n"; }
  Env env;
  env.secret_file = path;
  ASSERT_EQ(chmod(path, 0644), 0);
  auto loose = JobSecret::from_env(env);
  ASSERT_FALSE(loose.is_ok());
  EXPECT_NE(loose.status().message().find("chmod 600"), std::string::npos) << loose.status().message();
  ASSERT_EQ(chmod(path, 0600), 0);
  auto ok = JobSecret::from_env(env);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_TRUE(ok->present());
  // The file and the variable give the same key for the same text.
  Env direct;
  direct.secret = "an-ample-secret-of-the-job";
  auto same = JobSecret::from_env(direct);
  ASSERT_TRUE(same.is_ok());
  Nonce na = fresh_nonce(), nb = fresh_nonce();
  EXPECT_TRUE(ok->verify(Direction::to_acceptor, na, nb, "t", same->prove(Direction::to_acceptor, na, nb, "t")));
  unlink(path);
  auto gone = JobSecret::from_env(env);
  ASSERT_FALSE(gone.is_ok());
  EXPECT_NE(gone.status().message().find(path), std::string::npos);
}

TEST(JobSecret, RandomHexIsFreshAndHex) {
  std::string a = random_hex(32), b = random_hex(32);
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
}

}  // namespace
}  // namespace braid::auth

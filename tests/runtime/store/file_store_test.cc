// FileStore: every operation on a file in a fresh temporary directory, instances sharing one
// file, add's atomicity across threads and processes, and the errors for bad paths and timeouts.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "braid/error.h"
#include "braid/store.h"
#include "tests/runtime/store/store_contract.h"
#include "tests/support/subprocess.h"

namespace braid {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/braid-file-store-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/store";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<FileStore> open(std::chrono::milliseconds timeout = 2s) {
    return std::make_unique<FileStore>(path_, timeout);
  }
  // The error a call throws; fails the test if it throws none.
  template <typename F>
  Error error_of(F&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e;
    }
    ADD_FAILURE() << "expected a braid::Error";
    return Error(ErrorCode::ok, "");
  }
  std::string dir_;
  std::string path_;
};

TEST_F(FileStoreTest, SetGetOverwriteAndAddress) {
  auto s = open();
  EXPECT_EQ(s->address(), "file://" + path_);
  store_test::expect_set_get_overwrite(*s);
}

TEST_F(FileStoreTest, BinaryKeysAndValues) {
  auto s = open();
  store_test::expect_binary_round_trip(*s);
  auto other = open();  // reads it all back from the file
  EXPECT_EQ(other->get(std::string("k\0ey\xff", 5)), std::string("\0\1\2\0\xfe", 5));
  EXPECT_EQ(other->get("big"), s->get("big"));
}

TEST_F(FileStoreTest, AddCountsAsDecimalText) {
  auto s = open();
  store_test::expect_add_counts_as_decimal_text(*s);
  EXPECT_EQ(open()->get("n"), "4");  // the counter lives in the file
}

TEST_F(FileStoreTest, CompareSet) {
  auto s = open();
  store_test::expect_compare_set(*s);
}

TEST_F(FileStoreTest, DeleteCheckAndNumKeys) {
  auto s = open();
  store_test::expect_check_delete_num_keys(*s);
  auto other = open();  // deletes travel through the file too
  EXPECT_FALSE(other->check({"a"}));
  EXPECT_EQ(other->num_keys(), 1);
}

TEST_F(FileStoreTest, InstancesSeeEachOthersChanges) {
  auto a = open();
  auto b = open();
  a->set("x", "1");
  EXPECT_EQ(b->get("x"), "1");
  b->set("x", "2");
  b->set("y", "3");
  EXPECT_EQ(a->get("x"), "2");
  EXPECT_EQ(a->num_keys(), 2);
  a.reset();
  auto c = open();  // reopening keeps what is in the file
  EXPECT_EQ(c->get("y"), "3");
}

TEST_F(FileStoreTest, GetAndWaitReturnWhenAnotherInstanceSets) {
  auto waiter = open(5s);
  std::thread setter([this] {
    auto s = open();
    std::this_thread::sleep_for(50ms);
    s->set("late", "here");
    s->set("later", "too");
  });
  EXPECT_EQ(waiter->get("late"), "here");
  waiter->wait({"late", "later"});
  setter.join();
}

TEST_F(FileStoreTest, WaitTimeoutNamesMissingKeysAndPath) {
  auto s = open(100ms);
  s->set("present", "1");
  Error e = error_of([&] { s->wait({"present", "gone1", "gone2"}, 50ms); });
  EXPECT_EQ(e.code(), ErrorCode::timeout);
  std::string m = e.what();
  EXPECT_NE(m.find("gone1"), std::string::npos) << m;
  EXPECT_NE(m.find("gone2"), std::string::npos) << m;
  EXPECT_EQ(m.find("present,"), std::string::npos) << m;
  EXPECT_NE(m.find(path_), std::string::npos) << m;
  EXPECT_NE(m.find("BRAID_RENDEZVOUS_TIMEOUT_S"), std::string::npos) << m;

  Error g = error_of([&] { s->get("nope"); });  // get waits for the store's timeout
  EXPECT_EQ(g.code(), ErrorCode::timeout);
  EXPECT_NE(std::string(g.what()).find("nope"), std::string::npos) << g.what();
  EXPECT_EQ(error_of([&] { s->wait({"x"}, -1ms); }).code(), ErrorCode::invalid_argument);
}

TEST_F(FileStoreTest, BadPathsNameThePath) {
  std::string missing_dir = dir_ + "/no/such/dir/store";
  Error e = error_of([&] { FileStore s(missing_dir, 1s); });
  EXPECT_EQ(e.code(), ErrorCode::system);
  EXPECT_NE(std::string(e.what()).find(missing_dir), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("directory does not exist"), std::string::npos) << e.what();

  Error d = error_of([&] { FileStore s(dir_, 1s); });  // a directory, not a file
  EXPECT_NE(std::string(d.what()).find(dir_), std::string::npos) << d.what();

  std::string under_file = dir_ + "/plain";
  std::ofstream(under_file) << "x";
  Error f = error_of([&] { FileStore s(under_file + "/store", 1s); });  // parent is a file
  EXPECT_NE(std::string(f.what()).find(under_file), std::string::npos) << f.what();

  EXPECT_EQ(error_of([&] { FileStore s(path_, 0ms); }).code(), ErrorCode::invalid_argument);
  EXPECT_EQ(error_of([&] { FileStore s("", 1s); }).code(), ErrorCode::invalid_argument);
}

TEST_F(FileStoreTest, RefusesAFileThatIsNotAStore) {
  std::ofstream(path_) << "precious user data";
  Error e = error_of([&] { FileStore s(path_, 1s); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("not a braid store file"), std::string::npos) << e.what();
  std::ifstream in(path_);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "precious user data");
}

TEST_F(FileStoreTest, TornTailFromADeadWriterIsDropped) {
  {
    auto s = open();
    s->set("kept", "1");
  }
  {
    // A record header promising 100 bytes of key, then the writer "died".
    std::ofstream out(path_, std::ios::app | std::ios::binary);
    out.write("\x01\x64\x00\x00\x00\x00\x00\x00\x00" "abc", 12);
  }
  auto s = open();
  EXPECT_EQ(s->get("kept"), "1");
  s->set("after", "2");
  auto other = open();
  EXPECT_EQ(other->get("after"), "2");
  EXPECT_EQ(other->num_keys(), 2);
}

TEST_F(FileStoreTest, ReplacedFileIsReported) {
  auto s = open();
  s->set("a", "1");
  fs::remove(path_);
  Error e = error_of([&] { s->set("b", "2"); });
  EXPECT_NE(std::string(e.what()).find("removed or replaced"), std::string::npos) << e.what();
}

TEST_F(FileStoreTest, AddIsAtomicAcrossThreads) {
  constexpr int kThreads = 8;
  constexpr int kAdds = 100;
  auto shared = open();
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> seen(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Half share one instance (its mutex), half have their own (only the file lock).
      std::unique_ptr<FileStore> own = t % 2 ? open() : nullptr;
      FileStore& s = own ? *own : *shared;
      for (int i = 0; i < kAdds; ++i) seen[t].push_back(s.add("counter", 1));
    });
  }
  for (auto& th : threads) th.join();
  std::set<int64_t> all;
  for (const auto& v : seen) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kAdds));  // no value handed out twice
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kAdds);
  EXPECT_EQ(shared->get("counter"), std::to_string(kThreads * kAdds));
}

std::string child_binary() {
  if (std::getenv("FILE_STORE_CHILD") != nullptr) return testing::binary_from_env("FILE_STORE_CHILD");
  // Run by hand rather than through meson: the helper is built next to this test.
  return (fs::read_symlink("/proc/self/exe").parent_path() / "file_store_child").string();
}

TEST_F(FileStoreTest, AddIsAtomicAcrossProcesses) {
  constexpr int kProcs = 4;
  constexpr int kAdds = 500;
  std::vector<testing::Subprocess> procs;
  for (int p = 0; p < kProcs; ++p) {
    procs.emplace_back(std::vector<std::string>{child_binary(), path_, "counter", std::to_string(kAdds),
                                                std::to_string(kProcs)});
  }
  std::set<int64_t> all;
  for (auto& p : procs) {
    ASSERT_EQ(p.wait(20s), 0) << p.output();
    std::istringstream lines(p.output());
    int64_t v = 0;
    while (lines >> v) EXPECT_TRUE(all.insert(v).second) << "add returned " << v << " twice";
  }
  EXPECT_EQ(all.size(), static_cast<size_t>(kProcs * kAdds));
  EXPECT_EQ(open()->get("counter"), std::to_string(kProcs * kAdds));
}

}  // namespace
}  // namespace braid

// Replays every input kept for the fuzzers (fuzz/corpus/<target>/: the seeds;
// fuzz/regressions/<target>/: inputs that once crashed a fuzzer) through the same checks as the
// fuzz targets (fuzz/fuzz_checks.h), in the normal build, so that a fixed crash stays fixed
// without clang or libFuzzer. Under the ASan+UBSan build the sanitizers check them too.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <string_view>

#include "fuzz_checks.h"
#include "seeds.h"

namespace {

namespace fs = std::filesystem;

using Check = std::string (*)(std::string_view);

std::string ReadFile(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// Runs `check` on every file kept for `target`; returns how many seed files there were.
int ReplayAll(const std::string& target, Check check) {
  int seeds = 0;
  for (const char* kind : {"corpus", "regressions"}) {
    const fs::path dir = fs::path(IDEM_FUZZ_DIR) / kind / target;
    if (!fs::is_directory(dir)) continue;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
      if (!entry.is_regular_file() || entry.path().filename().string().starts_with(".")) continue;
      if (std::string_view(kind) == "corpus") ++seeds;
      EXPECT_EQ(check(ReadFile(entry.path())), "") << entry.path();
    }
  }
  return seeds;
}

// The seeds are those the current encoders write (seeds.h). Before: the frame seeds still
// carried protocol version 3 under version 5, so every request seed was refused by the first
// check and the fuzzer started from nothing there.
TEST(FuzzRegression, TheSeedsAreThoseOfTheCurrentFormats) {
  constexpr const char* kWriteAgain =
      "write the seeds again: cmake --build build --target fuzz_make_seeds && "
      "build/tests/fuzz_make_seeds fuzz/corpus";
  const fs::path corpus = fs::path(IDEM_FUZZ_DIR) / "corpus";
  std::set<fs::path> seeds;
  for (const idem::fuzz::Seed& seed : idem::fuzz::MakeSeeds()) {
    const fs::path file = corpus / seed.target / seed.name;
    seeds.insert(file);
    EXPECT_TRUE(fs::is_regular_file(file)) << file << " is missing: " << kWriteAgain;
    EXPECT_TRUE(ReadFile(file) == seed.bytes)
        << file << " is not what the current encoders write: " << kWriteAgain;
  }
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(corpus)) {
    if (!entry.is_regular_file()) continue;
    EXPECT_EQ(seeds.count(entry.path()), 1u)
        << entry.path() << " is no seed fuzz_make_seeds writes (seeds.h): remove it";
  }
}

TEST(FuzzRegression, RecordDecoderInputs) {
  EXPECT_GT(ReplayAll("record_decoder", idem::fuzz::CheckRecordDecoder), 0)
      << "no seeds under " << IDEM_FUZZ_DIR;
}

TEST(FuzzRegression, RecordCountsInputs) {
  EXPECT_GT(ReplayAll("record_counts", idem::fuzz::CheckRecordCounts), 0)
      << "no seeds under " << IDEM_FUZZ_DIR;
}

TEST(FuzzRegression, FrameDecoderInputs) {
  EXPECT_GT(ReplayAll("frame_decoder", idem::fuzz::CheckFrameDecoder), 0)
      << "no seeds under " << IDEM_FUZZ_DIR;
}

TEST(FuzzRegression, ImportLineInputs) {
  EXPECT_GT(ReplayAll("import_line", idem::fuzz::CheckImportLine), 0)
      << "no seeds under " << IDEM_FUZZ_DIR;
}

TEST(FuzzRegression, CliInputs) {
  EXPECT_GT(ReplayAll("cli", idem::fuzz::CheckCli), 0) << "no seeds under " << IDEM_FUZZ_DIR;
}

// The first crash the record fuzzer found, kept as a readable case: a stored time too large for
// a time_point overflowed when decoded (signed overflow; the record did not read back equal).
TEST(FuzzRegression, RecordTimeOutOfRangeIsCorruption) {
  idem::Record record;
  record.key = "k";
  std::string value = idem::storage::EncodeRecord(record);
  for (std::size_t i = 0; i < 8; ++i) value[idem::storage::kExpiresOffset + i] = '\x7f';
  const idem::Result<idem::Record> decoded = idem::storage::DecodeRecord("k", value);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), idem::Status::Code::kCorruption);
  EXPECT_NE(decoded.status().message().find("expires"), std::string::npos)
      << decoded.status().message();
}

}  // namespace

// Note [output folder]: the one way calibrate, sensitivity, compare and
// export write a folder. Each property on its own: a reader sees the old
// folder or the new one; nothing the command does not own is removed or
// replaced; a second writer is refused; a refusal leaves nothing behind.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "tests/test_util.h"

#include "apps/file_digest.h"
#include "apps/output_folder.h"
#include "core/text_file.h"

using namespace qat;
using namespace qat::apps;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const OutputFolderSpec kSpec{"tool", "--out", {"a.txt", "b.txt", "*.cache"}};

constexpr const char* kRecord = ".qat-output";

// Every entry under `dir` (names relative to it) with its contents, the
// folders' records left out (with_records: in).
std::set<std::pair<std::string, std::string>> tree(const fs::path& dir, bool with_records = false) {
  std::set<std::pair<std::string, std::string>> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!with_records && e.path().filename() == kRecord) continue;
    const std::string rel = fs::relative(e.path(), dir).string();
    out.emplace(rel, e.is_regular_file() ? read_text_file(e.path().string()) : std::string("<dir>"));
  }
  return out;
}

void write(const fs::path& p, const std::string& text) { write_text_file_atomic(p.string(), text); }

// `out` as a published folder of the spec's command holding `files`.
void published(const fs::path& out, const std::vector<std::pair<std::string, std::string>>& files,
               const OutputFolderSpec& spec) {
  OutputFolder f(spec, out.string());
  for (const auto& [name, text] : files) write(f.staged(name), text);
  f.publish();
}

}  // namespace

TEST_CASE("an output folder is replaced whole: the old one until publish, then exactly the new one", "[output]") {
  testing::TempDir t;
  const fs::path out = t.dir / "out";
  published(out, {{"a.txt", "old a"}, {"b.txt", "old b"}, {"x.cache", "old cache"}}, kSpec);
  {
    OutputFolder f(kSpec, out.string());
    write(f.staged("a.txt"), "new a");
    f.keep("x.cache");
    // Until publish the folder is the old one, whole.
    CHECK(tree(out) == decltype(tree(out)){{"a.txt", "old a"}, {"b.txt", "old b"}, {"x.cache", "old cache"}});
    f.publish();
  }
  // b.txt was not written this time: the new folder has none (it was the old run's).
  CHECK(tree(out) == decltype(tree(out)){{"a.txt", "new a"}, {"x.cache", "old cache"}});
  // No staging folder is left beside it.
  CHECK(tree(t.dir).size() == 3);
  // The record lists the new folder's files: the command, then each one's SHA-256, size and name.
  CHECK(read_text_file((out / kRecord).string()) ==
        "qat output folder of tool\n" + sha256_text("new a") + " 5 a.txt\n" + sha256_text("old cache") +
            " 9 x.cache\n");
}

TEST_CASE("an output folder not published (an error, a stop) keeps the old one and leaves nothing else", "[output]") {
  testing::TempDir t;
  const fs::path out = t.dir / "out";
  published(out, {{"a.txt", "old a"}}, kSpec);
  const auto before = tree(t.dir, true);
  {
    OutputFolder f(kSpec, out.string());
    write(f.staged("a.txt"), "half");
    write(f.staged("b.txt"), "new b");
  }
  CHECK(tree(t.dir, true) == before);
}

TEST_CASE("a staging folder of a killed command is removed by the next one", "[output]") {
  testing::TempDir t;
  const fs::path out = t.dir / "out";
  // A pid that cannot be running (above pid_max's largest value, 2^22).
  const fs::path dead = t.dir / (".out.tmp-9999999@" + temporary_tag().substr(temporary_tag().find('@') + 1));
  fs::create_directory(dead);
  write(dead / "a.txt", "half written");
  {
    OutputFolder f(kSpec, out.string());
    write(f.staged("a.txt"), "a");
    f.publish();
  }
  CHECK_FALSE(fs::exists(dead));
  CHECK(tree(out) == decltype(tree(out)){{"a.txt", "a"}});
}

TEST_CASE("an output folder holding anything the command does not write is refused, untouched", "[output]") {
  testing::TempDir t;
  const fs::path out = t.dir / "out";
  published(out, {{"a.txt", "mine"}}, kSpec);
  SECTION("a user's file") {
    write(out / "notes.md", "the user's");
    const auto before = tree(t.dir, true);
    REQUIRE_THROWS_WITH(OutputFolder(kSpec, out.string()),
                        Contains("tool: --out " + out.string() + " holds notes.md, which tool does not write") &&
                            Contains("it writes a.txt, b.txt, *.cache"));
    CHECK(tree(t.dir, true) == before);
  }
  SECTION("a user's file named like an output") {
    write(out / "b.txt", "the user's");
    const auto before = tree(t.dir, true);
    REQUIRE_THROWS_WITH(OutputFolder(kSpec, out.string()),
                        Contains("holds b.txt, which tool did not write there (its record .qat-output does not list it"));
    CHECK(tree(t.dir, true) == before);
  }
  SECTION("an output changed since the command wrote it") {
    write(out / "a.txt", "edited");
    const auto before = tree(t.dir, true);
    REQUIRE_THROWS_WITH(OutputFolder(kSpec, out.string()),
                        Contains("holds a.txt, changed since tool wrote it (its size or SHA-256 differs"));
    CHECK(tree(t.dir, true) == before);
  }
  SECTION("outputs without a record (written by hand, or by a qat before the records)") {
    fs::remove(out / kRecord);
    const auto before = tree(t.dir, true);
    REQUIRE_THROWS_WITH(OutputFolder(kSpec, out.string()),
                        Contains("holds a.txt, which tool did not write there (the folder has no record .qat-output"));
    CHECK(tree(t.dir, true) == before);
  }
  SECTION("a record not qat's (edited into another form)") {
    write(out / kRecord, "my notes\n");
    REQUIRE_THROWS_WITH(OutputFolder(kSpec, out.string()),
                        Contains("holds a.txt, which tool did not write there (its .qat-output is not a record qat "
                                 "wrote"));
  }
  SECTION("another command's folder, its names the same") {
    const fs::path other = t.dir / "other";
    published(other, {{"a.txt", "theirs"}}, OutputFolderSpec{"other", "--out", {"a.txt"}});
    const auto before = tree(t.dir, true);
    REQUIRE_THROWS_WITH(OutputFolder(kSpec, other.string()),
                        Contains("holds a.txt, which tool did not write there (its record .qat-output is of other"));
    CHECK(tree(t.dir, true) == before);
  }
  SECTION("a folder, even one named like an output") {
    fs::create_directory(out / "b.txt");
    write(out / "b.txt" / "inside", "the user's");
    const auto before = tree(t.dir);
    REQUIRE_THROWS_WITH(OutputFolder(kSpec, out.string()), Contains("holds b.txt (not a file)"));
    CHECK(tree(t.dir) == before);
  }
  SECTION("a file that appears while the command runs: publish refuses, the folder stays as it was") {
    OutputFolder f(kSpec, out.string());
    write(f.staged("a.txt"), "new");
    write(out / "late.txt", "the user's");
    REQUIRE_THROWS_WITH(f.publish(), Contains("holds late.txt"));
    CHECK(tree(out) == decltype(tree(out)){{"a.txt", "mine"}, {"late.txt", "the user's"}});
    CHECK(read_text_file((out / kRecord).string()) == "qat output folder of tool\n" + sha256_text("mine") + " 4 a.txt\n");
  }
  SECTION("a file, not a folder") {
    write(t.dir / "file", "x");
    REQUIRE_THROWS_WITH(OutputFolder(kSpec, (t.dir / "file").string()), Contains("exists and is not a folder"));
  }
}

TEST_CASE("an output folder's record keeps names with spaces, line breaks and backslashes", "[output]") {
  testing::TempDir t;
  const fs::path out = t.dir / "out";
  const std::vector<std::pair<std::string, std::string>> files = {
      {" lead.cache", "1"}, {"two\nlines.cache", "2"}, {"back\\slash\\n.cache", "3"}, {"a.txt", "4"}};
  published(out, files, kSpec);
  // Published again over itself: every file is on the record as written.
  REQUIRE_NOTHROW(published(out, files, kSpec));
  CHECK(tree(out).size() == files.size());
}

TEST_CASE("a second writer of the same output folder is refused while the first holds it", "[output]") {
  testing::TempDir t;
  const fs::path out = t.dir / "out";
  OutputFolder first(kSpec, out.string());
  REQUIRE_THROWS_WITH(OutputFolder(kSpec, out.string()),
                      Contains("tool: --out " + out.string() + " is being written by another qat command"));
  write(first.staged("a.txt"), "first");
  first.publish();
  CHECK(read_text_file((out / "a.txt").string()) == "first");
  // Once published (the lock is on the folder the first one replaced), a
  // second one locks the new folder and may replace it in turn.
  OutputFolder second(kSpec, out.string());
  write(second.staged("a.txt"), "second");
  second.publish();
  CHECK(read_text_file((out / "a.txt").string()) == "second");
}

TEST_CASE("a refused command leaves no folder it made", "[output]") {
  testing::TempDir t;
  const fs::path out = t.dir / "new" / "deeper" / "out";
  {
    OutputFolder f(kSpec, out.string());
    CHECK(fs::is_directory(out));
  }
  CHECK_FALSE(fs::exists(t.dir / "new"));
  CHECK(tree(t.dir).empty());
}

// Two commands into a folder neither found: one made it, the other took
// its lock first. The one refused must leave the folder to the holder (it
// removed it, and the holder's exchange then failed).
TEST_CASE("a command refused the lock leaves the folder it made to the command holding it", "[output]") {
  testing::TempDir t;
  const fs::path out = t.dir / "out";
  int holder = -1;
  OutputFolderSpec spec = kSpec;
  spec.before_lock = [&] {  // another command locks the folder this one just made
    holder = ::open(out.c_str(), O_RDONLY | O_DIRECTORY);
    REQUIRE(::flock(holder, LOCK_EX | LOCK_NB) == 0);
  };
  REQUIRE_THROWS_WITH(OutputFolder(spec, out.string()), Contains("is being written by another qat command"));
  CHECK(fs::is_directory(out));
  ::close(holder);
}

TEST_CASE("path_inside resolves .. and links, and a folder is not inside itself", "[output]") {
  testing::TempDir t;
  fs::create_directories(t.dir / "out");
  fs::create_directory_symlink(t.dir / "out", t.dir / "link");
  CHECK(path_inside((t.dir / "out" / "x").string(), (t.dir / "out").string()));
  CHECK(path_inside((t.dir / "link" / "x").string(), (t.dir / "out").string()));
  CHECK(path_inside((t.dir / "other" / ".." / "out" / "x").string(), (t.dir / "out").string()));
  CHECK_FALSE(path_inside((t.dir / "out").string(), (t.dir / "out").string()));
  CHECK_FALSE(path_inside((t.dir / "outer" / "x").string(), (t.dir / "out").string()));
}

// data/: image decoding, ImageFolder, transforms (against hand-computed
// pixels and torchvision's rules), DataLoader determinism and failure modes,
// the subset tool and the committed sample dataset.
#include <stb_image_write.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "tests/test_util.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/generator.h"
#include "data/image.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data/memory_limit.h"
#include "data/subset.h"
#include "data/transforms.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using namespace qat;
using namespace qat::data;

namespace {

struct TempDir : qat::testing::TempDir {
  TempDir() : qat::testing::TempDir("qat_data_test_") {}
};

void write_raw_png(const std::string& path, int w, int h, int comp, const std::vector<uint8_t>& px) {
  fs::create_directories(fs::path(path).parent_path());
  REQUIRE(stbi_write_png(path.c_str(), w, h, comp, px.data(), w * comp) != 0);
}

// write_png into a folder made first.
void put_png(const fs::path& path, const Image& img) {
  fs::create_directories(path.parent_path());
  write_png(path.string(), img);
}

void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// An h x w RGB image with value(y, x, c) at every pixel/channel.
template <class F>
Image image_of(int64_t h, int64_t w, F value) {
  Image img;
  img.height = h;
  img.width = w;
  img.rgb.resize(static_cast<size_t>(h * w * 3));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) img.rgb[(y * w + x) * 3 + c] = static_cast<uint8_t>(value(y, x, c) % 256);
  return img;
}

// An image whose every pixel/channel is distinct-ish: v = (seed + 7y + 3x + 50c) mod 256.
Image pattern(int64_t h, int64_t w, int seed = 0) {
  return image_of(h, w, [&](int64_t y, int64_t x, int c) { return seed + 7 * y + 3 * x + 50 * c; });
}

// Plain-spelled normalisation of one pixel value (float32, as torchvision).
float norm(int v, int c, const TransformSpec& s) { return (static_cast<float>(v) / 255.0f - s.mean[c]) / s.std[c]; }

// A small ImageFolder of PNG patterns: classes c0..c{k-1}, n images each, size h x w.
void make_folder(const fs::path& root, int classes, int per_class, int h, int w) {
  for (int c = 0; c < classes; ++c)
    for (int i = 0; i < per_class; ++i) {
      // (appends, not "c" + to_string(c): GCC 12 warns falsely about that one)
      std::string cls = "c", img = "img";
      cls += std::to_string(c);
      img += std::to_string(i) + ".png";
      const fs::path p = root / cls / img;
      fs::create_directories(p.parent_path());
      write_png(p.string(), pattern(h + i % 3, w + c, 31 * c + 11 * i));
    }
}

std::vector<Batch> run_epoch(DataLoader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  std::vector<Batch> out;
  Batch b;
  while (loader.next(b)) out.push_back(b);
  return out;
}

void require_same_batches(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].index == b[i].index);
    REQUIRE(a[i].images.sizes() == b[i].images.sizes());
    REQUIRE(a[i].images.to_vector() == b[i].images.to_vector());
    const auto* la = a[i].labels.data<int32_t>();
    const auto* lb = b[i].labels.data<int32_t>();
    REQUIRE(std::vector<int32_t>(la, la + a[i].labels.numel()) == std::vector<int32_t>(lb, lb + b[i].labels.numel()));
  }
}

// Pillow's BILINEAR resize of pattern_image(), recorded by
// tests/data/gen_resize_golden.py: bit-exact equality (FNV-1a of the bytes).
Image pattern_image(int64_t h, int64_t w) {
  return image_of(h, w, [](int64_t y, int64_t x, int c) { return y * 131 + x * 71 + c * 29 + ((x * y) % 17) * 13; });
}

uint64_t fnv1a(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (uint8_t b : bytes) h = (h ^ b) * 0x100000001B3ULL;
  return h;
}

// Runs `body` in a child process whose files may not grow past `max_bytes`
// (RLIMIT_FSIZE, SIGXFSZ ignored: a write past it fails with EFBIG, as on a
// full disk): the child's exit status, body's return value (255 on any other
// exception). A child keeps the cap away from the test process.
template <class Body>
int with_file_size_cap(rlim_t max_bytes, Body body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const struct rlimit r{max_bytes, max_bytes};
    if (::setrlimit(RLIMIT_FSIZE, &r) != 0) ::_exit(254);
    int rc = 255;
    try {
      rc = body();
    } catch (...) {
    }
    ::_exit(rc);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  INFO("child status " << status << (WIFSIGNALED(status) ? " (killed by a signal)" : ""));
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

// 0 when `f` throws qat::Error whose message holds every one of `parts`; 1
// when it throws another message, 2 when it does not throw.
template <class F>
int error_with(F f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const Error& e) {
    for (const auto& p : parts)
      if (std::string(e.what()).find(p) == std::string::npos) return 1;
    return 0;
  }
  return 2;
}

}  // namespace

// ---------------------------------------------------------------- images

TEST_CASE("decode_image: grey and RGBA become RGB, JPEG round trip, errors name the file", "[data]") {
  TempDir t;
  // 2x3 grey
  write_raw_png(t.file("grey.png"), 3, 2, 1, {0, 10, 20, 30, 40, 255});
  Image g = decode_image(t.file("grey.png"));
  REQUIRE(g.height == 2);
  REQUIRE(g.width == 3);
  for (int64_t y = 0; y < 2; ++y)
    for (int64_t x = 0; x < 3; ++x) {
      const uint8_t v = std::vector<uint8_t>{0, 10, 20, 30, 40, 255}[y * 3 + x];
      for (int c = 0; c < 3; ++c) REQUIRE(g.at(y, x, c) == v);
    }
  // 1x2 RGBA: alpha dropped, colour kept
  write_raw_png(t.file("rgba.png"), 2, 1, 4, {1, 2, 3, 0, 200, 100, 50, 128});
  Image a = decode_image(t.file("rgba.png"));
  REQUIRE(a.rgb == std::vector<uint8_t>{1, 2, 3, 200, 100, 50});
  // grey + alpha
  write_raw_png(t.file("ga.png"), 1, 1, 2, {77, 9});
  REQUIRE(decode_image(t.file("ga.png")).rgb == std::vector<uint8_t>{77, 77, 77});

  // JPEG of a flat colour decodes close to it
  Image flat;
  flat.height = 16;
  flat.width = 16;
  flat.rgb.assign(16 * 16 * 3, 0);
  for (size_t i = 0; i < flat.rgb.size(); i += 3) flat.rgb[i] = 200, flat.rgb[i + 1] = 60, flat.rgb[i + 2] = 30;
  write_jpeg(t.file("flat.jpg"), flat, 95);
  Image j = decode_image(t.file("flat.jpg"));
  REQUIRE(j.height == 16);
  REQUIRE(j.width == 16);
  for (size_t i = 0; i < j.rgb.size(); ++i) REQUIRE(std::abs(int(j.rgb[i]) - int(flat.rgb[i])) <= 3);

  // A JPEG cut short: the message says JPEG, and not stb_image's reason when
  // it is another format's ("bad png sig" was shown).
  {
    std::ifstream in(t.file("flat.jpg"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(t.file("cut.jpg"), std::ios::binary) << bytes.substr(0, bytes.size() / 3);
  }
  REQUIRE_THROWS_WITH(decode_image(t.file("cut.jpg")),
                      Contains(t.file("cut.jpg")) && Contains("as JPEG: the file is truncated or corrupt") &&
                          !Contains("png") && !Contains("sig"));
  write_text(t.file("bad.jpg"), "this is not a jpeg");
  REQUIRE_THROWS_WITH(decode_image(t.file("bad.jpg")),
                      Contains(t.file("bad.jpg")) && Contains("as an image (not a format stb_image reads: JPEG, PNG,"));
  write_text(t.file("empty.jpg"), "");
  REQUIRE_THROWS_WITH(decode_image(t.file("empty.jpg")), Contains(t.file("empty.jpg") + "' is empty (0 bytes)"));
  REQUIRE_THROWS_WITH(decode_image(t.file("missing.png")), Contains(t.file("missing.png")));
}

// stbi_write_jpg() to a path returned success on a full disk and left an
// empty file: a write that fails is an error naming the file, and nothing is
// left at the path (here: a file size cap, EFBIG, in a child process).
TEST_CASE("write_jpeg, write_png: a failed write is an error naming the file, no file left", "[data]") {
  TempDir t;
  const std::string jpg = t.file("a.jpg"), png = t.file("a.png");
  const Image img = pattern(64, 64);
  REQUIRE(with_file_size_cap(200, [&] {
            return error_with([&] { write_jpeg(jpg, img); }, {"write_jpeg: cannot write '" + jpg + "': File too large"});
          }) == 0);
  REQUIRE(with_file_size_cap(200, [&] {
            return error_with([&] { write_png(png, img); }, {"write_png: cannot write '" + png + "': File too large"});
          }) == 0);
  REQUIRE(fs::is_empty(t.dir));  // no empty a.jpg, no temporary file
  // Under the cap's size the same calls write whole files.
  REQUIRE(with_file_size_cap(1 << 20, [&] {
            write_jpeg(jpg, img);
            write_png(png, img);
            return 0;
          }) == 0);
  REQUIRE(decode_image(jpg).height == 64);
  REQUIRE(decode_image(png).rgb == img.rgb);
}

// An image name that is not a readable regular file is refused by name, with why.
TEST_CASE("decode_image: dangling links, link loops, folders, devices and pipes are refused saying which", "[data]") {
  TempDir t;
  fs::create_symlink(t.dir / "nowhere.jpg", t.dir / "dangling.jpg");
  fs::create_symlink(t.dir / "loop_b.jpg", t.dir / "loop_a.jpg");
  fs::create_symlink(t.dir / "loop_a.jpg", t.dir / "loop_b.jpg");
  fs::create_symlink("/dev/zero", t.dir / "zero.jpg");
  fs::create_directories(t.dir / "dir.jpg");
  REQUIRE(::mkfifo(t.file("pipe.jpg").c_str(), 0600) == 0);  // stbi_load would block on it forever
  const std::string nowhere = t.file("nowhere.jpg");
  REQUIRE_THROWS_WITH(decode_image(t.file("dangling.jpg")),
                      Contains("decode_image: '" + t.file("dangling.jpg") +
                               "' is a dangling symbolic link (its target '" + nowhere + "' does not exist)"));
  REQUIRE_THROWS_WITH(decode_image(t.file("loop_a.jpg")),
                      Contains("decode_image: '" + t.file("loop_a.jpg") +
                               "' is a symbolic link loop (too many levels of links from '" + t.file("loop_b.jpg") +
                               "')"));
  REQUIRE_THROWS_WITH(decode_image(t.file("zero.jpg")),
                      Contains("decode_image: '" + t.file("zero.jpg") +
                               "' is a character device (through the link to '/dev/zero'), not an image file"));
  REQUIRE_THROWS_WITH(decode_image(t.file("dir.jpg")),
                      Contains("decode_image: '" + t.file("dir.jpg") + "' is a folder, not an image file"));
  REQUIRE_THROWS_WITH(decode_image(t.file("pipe.jpg")),
                      Contains("decode_image: '" + t.file("pipe.jpg") + "' is a named pipe, not an image file"));
  REQUIRE_THROWS_WITH(decode_image(t.file("missing.jpg")),
                      Contains("decode_image: '" + t.file("missing.jpg") + "' does not exist"));
  // A link to an image reads as the image.
  write_png(t.file("real.png"), pattern(3, 4));
  fs::create_symlink(t.dir / "real.png", t.dir / "link.png");
  REQUIRE(decode_image(t.file("link.png")).rgb == pattern(3, 4).rgb);
}

// A few bytes can declare gigabytes of pixels: the limits are checked from
// the header, before stb_image allocates anything.
TEST_CASE("decode_image: pixel bombs and extreme aspect ratios are refused", "[data]") {
  TempDir t;
  // A JPEG of 25 bytes declaring 20000x20000 (SOI, SOF0, EOI: no image data).
  const std::vector<unsigned char> bomb{0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x11, 0x08, 0x4E, 0x20, 0x4E, 0x20, 0x03, 0x01,
                                        0x22, 0x00, 0x02, 0x11, 0x01, 0x03, 0x11, 0x01, 0xFF, 0xD9};
  std::ofstream(t.file("bomb.jpg"), std::ios::binary).write(reinterpret_cast<const char*>(bomb.data()), bomb.size());
  REQUIRE_THROWS_WITH(decode_image(t.file("bomb.jpg")),
                      Contains(t.file("bomb.jpg")) && Contains("declares 20000x20000") &&
                          Contains("data.max_image_pixels"));
  // A PNG signature and IHDR declaring 100000x100000, which stb_image
  // refuses as "too large" before saying how large: the limit names it.
  const std::vector<unsigned char> png_bomb{0x89, 'P',  'N',  'G',  0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13, 'I', 'H',
                                            'D',  'R',  0x00, 0x01, 0x86, 0xA0, 0x00, 0x01, 0x86, 0xA0, 8, 2, 0, 0, 0};
  std::ofstream(t.file("bomb.png"), std::ios::binary)
      .write(reinterpret_cast<const char*>(png_bomb.data()), png_bomb.size());
  REQUIRE_THROWS_WITH(decode_image(t.file("bomb.png")),
                      Contains(t.file("bomb.png")) && Contains("declares 100000x100000") &&
                          Contains("data.max_image_pixels"));
  // 1 x 100: an aspect ratio of 100 (a 1 x 60000 strip resizes into a gigapixel image).
  write_png(t.file("strip.png"), image_of(1, 100, [](int64_t, int64_t x, int) { return x; }));
  REQUIRE_THROWS_WITH(decode_image(t.file("strip.png")), Contains("aspect ratio of 100") &&
                                                            Contains("data.max_aspect_ratio"));
  REQUIRE(decode_image(t.file("strip.png"), DecodeLimits{1 << 26, 100.0}).width == 100);
  // Limits are settings: a smaller pixel budget refuses a small image.
  write_png(t.file("small.png"), image_of(20, 20, [](int64_t y, int64_t x, int) { return x + y; }));
  REQUIRE(decode_image(t.file("small.png")).height == 20);
  REQUIRE_THROWS_WITH(decode_image(t.file("small.png"), DecodeLimits{399, 32.0}), Contains("400 pixels"));
}

TEST_CASE("resize_shorter: torchvision output size, flat colours stay flat, identity is exact", "[data]") {
  Image img = pattern(30, 47);
  Image r = resize_shorter(img, 10);
  REQUIRE(r.height == 10);
  REQUIRE(r.width == 15);  // int(10 * 47 / 30) = 15
  Image tall = resize_shorter(pattern(47, 30), 10);
  REQUIRE(tall.height == 15);
  REQUIRE(tall.width == 10);
  REQUIRE(resize_shorter(img, 30).rgb == img.rgb);

  Image flat;
  flat.height = 20;
  flat.width = 24;
  flat.rgb.assign(20 * 24 * 3, 0);
  for (size_t i = 0; i < flat.rgb.size(); i += 3) flat.rgb[i] = 9, flat.rgb[i + 1] = 128, flat.rgb[i + 2] = 250;
  for (int64_t s : {7, 20, 33}) {
    Image f = resize_shorter(flat, s);
    for (size_t i = 0; i < f.rgb.size(); i += 3) {
      REQUIRE(int(f.rgb[i]) == 9);
      REQUIRE(int(f.rgb[i + 1]) == 128);
      REQUIRE(int(f.rgb[i + 2]) == 250);
    }
  }
}

TEST_CASE("resize_exact: bit-exact with Pillow's Image.resize(BILINEAR)", "[data]") {
  std::ifstream in(std::string(QAT_SOURCE_DIR) + "/tests/data/resize_golden.txt");
  REQUIRE(in.good());
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    int64_t ih, iw, oh, ow;
    std::string hex;
    ls >> ih >> iw >> oh >> ow >> hex;
    const Image out = resize_exact(pattern_image(ih, iw), oh, ow);
    INFO(ih << "x" << iw << " -> " << oh << "x" << ow);
    REQUIRE(out.height == oh);
    REQUIRE(out.width == ow);
    REQUIRE(fnv1a(out.rgb) == std::stoull(hex, nullptr, 16));
    ++cases;
  }
  REQUIRE(cases >= 10);
}

TEST_CASE("crops: torchvision centre placement (round half to even), padding, flip", "[data]") {
  // torchvision: top = int(round((H - h) / 2)), Python round = half to even.
  CHECK(center_crop_box(7, 7, 2, 2).top == 2);  // 2.5 -> 2
  CHECK(center_crop_box(5, 5, 2, 2).top == 2);  // 1.5 -> 2
  CHECK(center_crop_box(9, 9, 2, 2).top == 4);  // 3.5 -> 4
  CHECK(center_crop_box(11, 11, 2, 2).top == 4);  // 4.5 -> 4
  CHECK(center_crop_box(10, 13, 4, 4).left == 4);  // 4.5 -> 4
  CHECK(center_crop_box(8, 8, 4, 4).top == 2);
  // crop larger than the image: pad (h-H)//2 on top
  CHECK(center_crop_box(3, 4, 6, 7).top == -1);
  CHECK(center_crop_box(3, 4, 6, 7).left == -1);

  Image img = pattern(5, 6);
  Image cc = center_crop(img, 3, 2);  // top = round(1.0) = 1, left = round(2.0) = 2
  REQUIRE(cc.height == 3);
  REQUIRE(cc.width == 2);
  for (int64_t y = 0; y < 3; ++y)
    for (int64_t x = 0; x < 2; ++x)
      for (int c = 0; c < 3; ++c) REQUIRE(cc.at(y, x, c) == img.at(y + 1, x + 2, c));

  // crop of the image padded by 2: (0,0) is padding, (2,2) is the image's (0,0)
  Image cp = crop_padded(img, 1, 0, 4, 4, 2);
  for (int64_t y = 0; y < 4; ++y)
    for (int64_t x = 0; x < 4; ++x)
      for (int c = 0; c < 3; ++c) {
        const int64_t sy = y + 1 - 2, sx = x - 2;
        const int expect = (sy >= 0 && sx >= 0) ? img.at(sy, sx, c) : 0;
        REQUIRE(int(cp.at(y, x, c)) == expect);
      }
  REQUIRE_THROWS_WITH(crop_padded(img, 6, 0, 4, 4, 2), Contains("does not fit"));

  Image f = hflip(img);
  for (int64_t y = 0; y < 5; ++y)
    for (int64_t x = 0; x < 6; ++x)
      for (int c = 0; c < 3; ++c) REQUIRE(f.at(y, x, c) == img.at(y, 5 - x, c));
}

// ---------------------------------------------------------------- ImageFolder

TEST_CASE("ImageFolder: class order, labels, extensions, grey/RGBA, corrupt files", "[data]") {
  TempDir t;
  const fs::path root = t.dir / "root";
  write_raw_png((root / "cat" / "b.png").string(), 2, 2, 1, {5, 6, 7, 8});
  write_raw_png((root / "cat" / "a.PNG").string(), 1, 1, 4, {9, 8, 7, 0});
  fs::create_directories(root / "dog");
  write_jpeg((root / "dog" / "c.jpg").string(), pattern(8, 8));
  write_text((root / "dog" / "bad.jpg").string(), "garbage");
  write_text((root / "dog" / "notes.txt").string(), "ignored");
  write_text((root / "dog" / ".hidden.jpg").string(), "ignored");
  fs::create_directories(root / "ant");
  write_png((root / "ant" / "e.JPEG").string(), pattern(3, 3));  // PNG bytes, upper-case .JPEG name
  write_png((root / "ant" / "d.Jpg").string(), pattern(3, 3));
  fs::create_directories(root / ".git");
  write_text((root / "README.txt").string(), "ignored");

  ImageFolder f(root.string());
  REQUIRE(f.classes() == std::vector<std::string>{"ant", "cat", "dog"});
  REQUIRE(f.size() == 6);
  const std::vector<std::string> names = {"d.Jpg", "e.JPEG", "a.PNG", "b.png", "bad.jpg", "c.jpg"};
  const std::vector<int32_t> labels = {0, 0, 1, 1, 2, 2};
  for (int64_t i = 0; i < f.size(); ++i) {
    CHECK(fs::path(f.path(i)).filename().string() == names[i]);
    CHECK(f.label(i) == labels[i]);
  }
  REQUIRE(f.indices_of(1) == std::vector<int64_t>{2, 3});
  REQUIRE(f.load(2)->rgb == std::vector<uint8_t>{9, 8, 7});
  REQUIRE(f.load(3)->rgb == std::vector<uint8_t>{5, 5, 5, 6, 6, 6, 7, 7, 7, 8, 8, 8});
  REQUIRE(f.load(1)->rgb == pattern(3, 3).rgb);
  REQUIRE_THROWS_WITH(f.load(4), Contains("bad.jpg"));
  REQUIRE_THROWS_WITH(f.path(6), Contains("out of range"));

  ImageFolder skip(root.string(), /*skip_bad_images=*/true);
  REQUIRE_FALSE(skip.load(4).has_value());
  REQUIRE(skip.load(5).has_value());
}

// A class folder reached through a link that leads nowhere was skipped, and
// every class after it took the label of the one before.
TEST_CASE("ImageFolder: a link to nothing among the class folders is refused by name", "[data]") {
  TempDir t;
  const fs::path root = t.dir / "root";
  put_png(root / "a" / "x.png", pattern(4, 4));
  put_png(root / "c" / "x.png", pattern(4, 4));
  std::ofstream(root / "notes.txt") << "a file among the classes is not a class";
  fs::create_symlink(root / "a", root / "a_link");  // a link to a folder is a class
  REQUIRE(ImageFolder(root.string()).classes() == std::vector<std::string>{"a", "a_link", "c"});
  fs::create_symlink(t.dir / "unmounted" / "b", root / "b");
  REQUIRE_THROWS_WITH(ImageFolder(root.string()),
                      Contains("ImageFolder: '" + (root / "b").string() + "' under root '" + root.string() +
                               "' is a link that cannot be followed (its target does not exist)") &&
                          Contains("it may be a class folder"));
  fs::remove(root / "b");
  fs::create_symlink(root / "b", root / "b");
  REQUIRE_THROWS_WITH(ImageFolder(root.string()), Contains("'" + (root / "b").string() + "' under root") &&
                                                      Contains("is a link that cannot be followed (a link loop)"));
}

// Only regular files used to be listed: a dangling link, a link loop, a link
// to /dev/zero or a folder named x.jpg vanished from the dataset without a
// word. They are listed, and load() refuses them (or skips them) by name.
TEST_CASE("ImageFolder: image names that are not readable files are listed and refused by name", "[data]") {
  TempDir t;
  const fs::path cls = t.dir / "root" / "cls";
  put_png(cls / "a.png", pattern(4, 4));
  fs::create_symlink(cls / "gone.jpg", cls / "b_dangling.jpg");
  fs::create_symlink(cls / "c_loop.jpg", cls / "c_loop.jpg");
  fs::create_symlink("/dev/zero", cls / "d_zero.jpg");
  fs::create_directories(cls / "e_dir.jpg");
  fs::create_directories(cls / "sub");  // no image name: not searched, not listed
  ImageFolder f((t.dir / "root").string());
  REQUIRE(f.size() == 5);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"b_dangling.jpg", "' is a dangling symbolic link"},
      {"c_loop.jpg", "' is a symbolic link loop"},
      {"d_zero.jpg", "' is a character device (through the link to '/dev/zero')"},
      {"e_dir.jpg", "' is a folder, not an image file"}};
  REQUIRE(f.load(0)->rgb == pattern(4, 4).rgb);
  for (size_t i = 0; i < refused.size(); ++i) {
    INFO(refused[i].first);
    REQUIRE(f.path(static_cast<int64_t>(i) + 1) == (cls / refused[i].first).string());
    REQUIRE_THROWS_WITH(f.load(static_cast<int64_t>(i) + 1),
                        Contains("'" + (cls / refused[i].first).string() + refused[i].second));
  }
  // data.on_bad_image: skip drops them like corrupt files, counted and named by the loader.
  ImageFolder skip((t.dir / "root").string(), /*skip_bad_images=*/true);
  TransformSpec s;
  s.image_size = 4;
  s.resize = 4;
  LoaderOptions o;
  o.batch_size = 5;
  o.shuffle = false;
  o.workers = 0;
  DataLoader loader(skip, s, o);
  const auto batches = run_epoch(loader, 0);
  REQUIRE(batches.size() == 1);
  REQUIRE(batches[0].images.size(0) == 1);
  REQUIRE(loader.stats().skipped_images == 4);
  std::vector<std::string> bad;
  for (const auto& [name, why] : refused) bad.push_back((cls / name).string());
  REQUIRE(loader.bad_files() == bad);
}

// A class name goes into checkpoints as JSON text: one that is not UTF-8 used
// to fail there, after a whole epoch. Refused when the folders are listed.
TEST_CASE("ImageFolder: class folders that are not UTF-8 or hold control characters are refused, escaped", "[data]") {
  TempDir t;
  const fs::path root = t.dir / "train";
  put_png(root / "good" / "a.png", pattern(2, 2));
  put_png(root / "caf\xc3\xa9" / "a.png", pattern(2, 2));  // UTF-8: fine
  REQUIRE(ImageFolder(root.string()).classes() == std::vector<std::string>{"caf\xc3\xa9", "good"});
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"cls\xff\xfe", "class folder 'cls\\xff\\xfe' under root '" + root.string() + "' is not valid UTF-8"},
      {"a\tb", "class folder 'a\\x09b' under root '" + root.string() + "' holds control characters"},
      {"c1\xc2\x85", "class folder 'c1\\xc2\\x85' under root '" + root.string() + "' holds control characters"},
      {"cut\xc3", "class folder 'cut\\xc3' under root '" + root.string() + "' is not valid UTF-8"}};
  for (const auto& [name, message] : bad) {
    INFO(message);
    put_png(root / name / "a.png", pattern(2, 2));
    REQUIRE_THROWS_WITH(ImageFolder(root.string(), false, {}, "data.train"),
                        Contains("data.train: ImageFolder: " + message) && Contains("rename the folder"));
    REQUIRE_THROWS_WITH(ImageFolder(root.string()), Contains(std::string("ImageFolder: ") + message));
    fs::remove_all(root / name);
  }
  // The subset tool lists its source the same way: refused before anything is written.
  put_png(t.dir / "src" / "train" / "cls\xff" / "a.png", pattern(20, 20));
  put_png(t.dir / "src" / "val" / "cls\xff" / "a.png", pattern(20, 20));
  REQUIRE_THROWS_WITH(make_subset(t.file("src"), t.file("out"), 1, 1, 10, 0),
                      Contains("class folder 'cls\\xff' under root '" + t.file("src") + "/train' is not valid UTF-8"));
  REQUIRE_FALSE(fs::exists(t.dir / "out"));
}

TEST_CASE("ImageFolder: missing or empty roots are errors naming the root", "[data]") {
  TempDir t;
  REQUIRE_THROWS_WITH(ImageFolder(t.file("nope")), Contains(t.file("nope")) && Contains("does not exist"));
  REQUIRE_THROWS_WITH(ImageFolder(t.dir.string()), Contains(t.dir.string()) && Contains("no class folders"));
  fs::create_directories(t.dir / "empty_class");
  write_text(t.file("empty_class/x.txt"), "");
  REQUIRE_THROWS_WITH(ImageFolder(t.dir.string()), Contains("empty_class") && Contains("holds no"));
}

// ---------------------------------------------------------------- transforms

TEST_CASE("transforms: eval = resize + centre crop + normalise, pixel by pixel", "[data]") {
  TransformSpec s;
  s.image_size = 3;
  s.resize = 0;  // keep the size: only the crop and normalisation are under test
  Image img = pattern(5, 6);
  std::vector<float> out(sample_numel(s));
  Generator gen(1);
  transform_prepared(img, s, /*train=*/false, gen, out.data());
  // top = round(1.0) = 1, left = round(1.5) = 2
  for (int c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 3; ++y)
      for (int64_t x = 0; x < 3; ++x) REQUIRE(out[(c * 3 + y) * 3 + x] == norm(img.at(y + 1, x + 2, c), c, s));
  // eval draws nothing from the generator
  Generator fresh(1);
  REQUIRE(gen.next_u64() == fresh.next_u64());

  // with a resize: equals resize_shorter then the centre crop
  s.resize = 4;
  s.image_size = 4;
  out.resize(sample_numel(s));
  apply_transform(img, s, false, gen, out.data());
  std::vector<float> expect(sample_numel(s));
  write_normalized(center_crop(resize_shorter(img, 4), 4, 4), {0, 0, 4, 4}, false, s, expect.data());
  REQUIRE(out == expect);
  // spot value of the normalisation: mean/std of channel 1
  Image one;
  one.height = one.width = 1;
  one.rgb = {0, 255, 128};
  s.image_size = 1;
  s.resize = 0;
  std::vector<float> o1(sample_numel(s));
  transform_prepared(one, s, false, gen, o1.data());
  REQUIRE(o1[0] == Approx(-0.485 / 0.229).epsilon(1e-6));
  REQUIRE(o1[1] == Approx((1.0 - 0.456) / 0.224).epsilon(1e-6));
  REQUIRE(o1[2] == Approx((128.0 / 255.0 - 0.406) / 0.225).epsilon(1e-6));
}

TEST_CASE("transforms: train random crop with padding and flip matches a hand-placed crop", "[data]") {
  TransformSpec s;
  s.image_size = 4;
  s.resize = 0;
  s.padding = 2;
  s.random_crop = true;
  s.hflip = true;
  const Image img = pattern(5, 6, 3);
  std::set<std::tuple<int64_t, int64_t, bool>> seen;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Generator gen(seed);
    std::vector<float> out(sample_numel(s));
    transform_prepared(img, s, true, gen, out.data());
    // replay the draws: top, left in the padded image, then the flip
    Generator replay(seed);
    const int64_t top = static_cast<int64_t>(replay.below(5 + 4 - 4 + 1));
    const int64_t left = static_cast<int64_t>(replay.below(6 + 4 - 4 + 1));
    const bool flip = replay.bernoulli(0.5f);
    seen.insert({top, left, flip});
    Image expect = crop_padded(img, top, left, 4, 4, 2);
    if (flip) expect = hflip(expect);
    for (int c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 4; ++y)
        for (int64_t x = 0; x < 4; ++x) REQUIRE(out[(c * 4 + y) * 4 + x] == norm(expect.at(y, x, c), c, s));
  }
  REQUIRE(seen.size() > 50);  // 6 * 7 * 2 = 84 possible placements; most are reached

  // A crop larger than the padded image is an error naming the sizes.
  s.image_size = 12;
  std::vector<float> big(sample_numel(s));
  Generator gen(0);
  REQUIRE_THROWS_WITH(transform_prepared(img, s, true, gen, big.data()), Contains("does not fit"));
}

TEST_CASE("transforms: random_resized_crop within bounds, seeded, torchvision fallback", "[data]") {
  const std::array<double, 2> scale = {0.08, 1.0}, ratio = {3.0 / 4.0, 4.0 / 3.0};
  for (auto [h, w] : std::vector<std::pair<int64_t, int64_t>>{{80, 120}, {120, 80}, {7, 9}, {1, 1}, {2, 50}}) {
    for (uint64_t seed = 0; seed < 300; ++seed) {
      Generator g1(seed), g2(seed);
      const CropBox b = random_resized_crop_box(h, w, scale, ratio, g1);
      const CropBox b2 = random_resized_crop_box(h, w, scale, ratio, g2);
      REQUIRE((b.top == b2.top && b.left == b2.left && b.height == b2.height && b.width == b2.width));
      REQUIRE(b.height > 0);
      REQUIRE(b.width > 0);
      REQUIRE(b.top >= 0);
      REQUIRE(b.left >= 0);
      REQUIRE(b.top + b.height <= h);
      REQUIRE(b.left + b.width <= w);
    }
  }
  // Placed uniformly: the last row is reachable (top = H - h); the aspect is
  // log-uniform: on a square image as many wide crops as tall ones (a
  // uniform draw over [1/4, 4] gives about 3 wide to 1 tall). 2000 fixed seeds.
  {
    bool bottom = false;
    int wide = 0, not_square = 0;
    for (uint64_t seed = 0; seed < 2000; ++seed) {
      Generator gs(seed);
      const CropBox b = random_resized_crop_box(200, 200, {0.08, 1.0}, {0.25, 4.0}, gs);
      bottom = bottom || (b.height < 200 && b.top == 200 - b.height);
      wide += b.width > b.height;
      not_square += b.width != b.height;
    }
    CHECK(bottom);
    INFO(wide << " wide of " << not_square);
    CHECK(std::abs(static_cast<double>(wide) / not_square - 0.5) < 0.05);
  }
  // Fallback (no try fits: area > image): centre crop clamped to the ratio range.
  Generator g(0);
  CropBox f = random_resized_crop_box(10, 40, {5.0, 6.0}, ratio, g);  // in_ratio 4 > 4/3
  CHECK(f.height == 10);
  CHECK(f.width == 13);  // round(10 * 4/3)
  CHECK(f.top == 0);
  CHECK(f.left == 13);  // (40 - 13) // 2
  f = random_resized_crop_box(40, 10, {5.0, 6.0}, ratio, g);  // in_ratio 1/4 < 3/4
  CHECK(f.width == 10);
  CHECK(f.height == 13);  // round(10 / 0.75) = round(13.33)
  CHECK(f.top == 13);
  f = random_resized_crop_box(10, 11, {5.0, 6.0}, ratio, g);  // ratio inside: whole image
  CHECK((f.top == 0 && f.left == 0 && f.height == 10 && f.width == 11));

  // The train path with RRC is deterministic per generator seed and writes S x S.
  TransformSpec s;
  s.image_size = 8;
  s.resize = 0;
  s.random_resized_crop = true;
  Image img = pattern(20, 30);
  std::vector<float> a(sample_numel(s)), b(sample_numel(s));
  Generator ga(5), gb(5);
  transform_prepared(img, s, true, ga, a.data());
  transform_prepared(img, s, true, gb, b.data());
  REQUIRE(a == b);
}

// ---------------------------------------------------------------- DataLoader

TEST_CASE("DataLoader: same seed, same batches for any worker count, epochs differ, drop_last", "[data]") {
  TempDir t;
  make_folder(t.dir / "ds", 3, 7, 12, 14);  // 21 images
  ImageFolder f((t.dir / "ds").string());
  TransformSpec s;
  s.image_size = 8;
  s.resize = 10;
  s.padding = 1;
  LoaderOptions o;
  o.batch_size = 4;
  o.seed = 42;

  std::vector<std::vector<Batch>> by_workers;
  for (int64_t workers : {0, 1, 3}) {
    o.workers = workers;
    o.prefetch = 2;
    DataLoader loader(f, s, o);
    REQUIRE(loader.batches_per_epoch() == 6);
    auto e0 = run_epoch(loader, 0);
    REQUIRE(e0.size() == 6);
    REQUIRE(e0.back().images.sizes() == Shape{1, 3, 8, 8});
    REQUIRE(e0.front().images.sizes() == Shape{4, 3, 8, 8});
    by_workers.push_back(e0);
    auto e0_again = run_epoch(loader, 0);
    require_same_batches(e0, e0_again);
  }
  require_same_batches(by_workers[0], by_workers[1]);
  require_same_batches(by_workers[0], by_workers[2]);

  o.workers = 2;
  o.cache = true;
  DataLoader cached(f, s, o);
  require_same_batches(by_workers[0], run_epoch(cached, 0));
  require_same_batches(by_workers[0], run_epoch(cached, 0));  // second pass from the cache

  // Different epochs: different order (and augmentation); every sample once.
  DataLoader loader(f, s, o);
  REQUIRE(loader.epoch_order(0) != loader.epoch_order(1));
  auto order = loader.epoch_order(1);
  std::sort(order.begin(), order.end());
  for (int64_t i = 0; i < 21; ++i) REQUIRE(order[i] == i);
  auto e1 = run_epoch(loader, 1);
  REQUIRE(e1[0].images.to_vector() != by_workers[0][0].images.to_vector());
  // labels follow the order
  const auto ord1 = loader.epoch_order(1);
  for (int64_t k = 0; k < 4; ++k) REQUIRE(e1[0].labels.data<int32_t>()[k] == f.label(ord1[k]));

  // A different seed changes epoch 0.
  o.seed = 43;
  DataLoader other(f, s, o);
  REQUIRE(other.epoch_order(0) != loader.epoch_order(0));

  // No shuffle: dataset order; drop_last drops the short batch.
  o.shuffle = false;
  o.drop_last = true;
  o.train = false;
  DataLoader plain(f, s, o);
  REQUIRE(plain.batches_per_epoch() == 5);
  REQUIRE(plain.samples_per_epoch() == 20);
  auto ep = run_epoch(plain, 3);
  REQUIRE(ep.size() == 5);
  for (size_t b = 0; b < ep.size(); ++b) {
    REQUIRE(ep[b].images.size(0) == 4);
    REQUIRE(ep[b].index == static_cast<int64_t>(b));
    for (int64_t k = 0; k < 4; ++k) REQUIRE(ep[b].labels.data<int32_t>()[k] == f.label(b * 4 + k));
  }
  // eval samples match apply_transform on the decoded image
  std::vector<float> expect(sample_numel(s));
  Generator unused(0);
  apply_transform(*f.load(5), s, false, unused, expect.data());
  const auto v = ep[1].images.to_vector();
  REQUIRE(std::vector<float>(v.begin() + sample_numel(s), v.begin() + 2 * sample_numel(s)) == expect);

  REQUIRE(loader.stats().batches == 6);
  REQUIRE(loader.stats().wait_seconds >= 0.0);
}

TEST_CASE("DataLoader: corrupt image rethrown from next() naming the file, or skipped and counted", "[data]") {
  TempDir t;
  make_folder(t.dir / "ds", 2, 5, 10, 10);  // 10 images
  write_text((t.dir / "ds" / "c1" / "img2.png").string(), "corrupt");
  TransformSpec s;
  s.image_size = 6;
  s.resize = 8;
  LoaderOptions o;
  o.batch_size = 3;
  o.shuffle = false;
  for (int64_t workers : {0, 2}) {
    o.workers = workers;
    ImageFolder strict((t.dir / "ds").string());
    DataLoader loader(strict, s, o);
    loader.start_epoch(0);
    Batch b;
    REQUIRE(loader.next(b));  // samples 0..2
    REQUIRE(loader.next(b));  // samples 3..5
    // samples 6..8 hold c1/img2 (index 7)
    REQUIRE_THROWS_WITH(loader.next(b), Contains("img2.png") && Contains("c1"));
    REQUIRE_FALSE(loader.next(b));  // the epoch is over
    // a new epoch starts again
    loader.start_epoch(1);
    REQUIRE(loader.next(b));

    ImageFolder lenient((t.dir / "ds").string(), /*skip_bad_images=*/true);
    DataLoader skipping(lenient, s, o);
    for (int epoch = 0; epoch < 2; ++epoch) {
      auto batches = run_epoch(skipping, epoch);
      REQUIRE(batches.size() == 4);
      REQUIRE(batches[2].images.size(0) == 2);
      REQUIRE(batches[2].labels.numel() == 2);
      REQUIRE(batches[2].skipped == 1);
    }
    REQUIRE(skipping.stats().skipped_images == 2);
    REQUIRE(skipping.bad_files() == std::vector<std::string>{(t.dir / "ds" / "c1" / "img2.png").string()});
    skipping.reset_stats();
    REQUIRE(skipping.stats().skipped_images == 0);
  }
}

// Note [cache size]: data.resize 8000 with data.cache grew to 14 GB and died
// in std::bad_alloc. The estimate and the refusal, with a small memory.
TEST_CASE("DataLoader: a cache larger than half the memory is refused before loading, naming the keys", "[data]") {
  TransformSpec s;
  s.image_size = 64;
  s.resize = 8000;
  const uint64_t per = 8000ull * 8000 * 3 + sizeof(Image);
  REQUIRE(cache_bytes_at_least(300, s) == 300 * per);
  REQUIRE_THROWS_WITH(check_cache_fits(300, s, uint64_t{8} << 30, "ds/train"),
                      Contains("DataLoader: data.cache: true would keep the 300 images of 'ds/train' in memory at "
                               "data.resize 8000: at least 53.6 GiB (8000x8000x3 bytes each, more when not square), "
                               "more than half of the 8.0 GiB of memory this process may use; set data.cache: false (images are decoded "
                               "every epoch) or a smaller data.resize"));
  // The limit is half the memory, inclusive.
  REQUIRE_NOTHROW(check_cache_fits(300, s, 2 * 300 * per, "ds/train"));
  REQUIRE_THROWS(check_cache_fits(300, s, 2 * 300 * per - 2, "ds/train"));
  REQUIRE_NOTHROW(check_cache_fits(300, s, 0, "ds/train"));  // 0: unknown memory, no check
  s.resize = 0;  // the decoded size: unknown before decoding
  REQUIRE(cache_bytes_at_least(300, s) == 0);
  REQUIRE(physical_memory_bytes() > 0);
  REQUIRE(memory_limit_bytes() > 0);

  // The loader checks before it loads anything; without the cache it does not.
  TempDir t;
  make_folder(t.dir / "ds", 2, 3, 8, 8);
  ImageFolder folder((t.dir / "ds").string());
  TransformSpec small;
  small.image_size = 8;
  small.resize = 100;  // 6 images of >= 100x100x3 bytes: >= 180,000 bytes
  LoaderOptions o;
  o.cache = true;
  o.workers = 0;
  o.memory_bytes = 300000;
  REQUIRE_THROWS_WITH(DataLoader(folder, small, o), Contains("data.cache: true would keep the 6 images of '" +
                                                             (t.dir / "ds").string() + "' in memory at data.resize 100"));
  o.memory_bytes = 0;  // this machine's memory
  REQUIRE_NOTHROW(DataLoader(folder, small, o));
  o.memory_bytes = 300000;
  o.cache = false;
  REQUIRE_NOTHROW(DataLoader(folder, small, o));
}

// A container's memory limit kills the process there, whatever the machine
// has: the cache estimate is held against the lower of the two.
TEST_CASE("cgroup_memory_limit_bytes reads v1 and v2 limits at the process's cgroup or the mount", "[data]") {
  TempDir t;
  const auto put = [&](const fs::path& rel, const std::string& text) {
    fs::create_directories((t.dir / rel).parent_path());
    std::ofstream(t.dir / rel) << text;
  };
  const std::string root = t.dir.string();
  const std::string v1 = "12:pids:/\n4:memory:/box/job\n1:cpu,cpuacct:/\n";
  CHECK(cgroup_memory_limit_bytes(v1, root) == 0);  // nothing to read
  put("memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  CHECK(cgroup_memory_limit_bytes(v1, root) == 0);
  put("memory/box/job/memory.limit_in_bytes", "2147483648\n");
  CHECK(cgroup_memory_limit_bytes(v1, root) == 2147483648ULL);
  put("memory/box/memory.limit_in_bytes", "1610612736\n");  // the parent's, lower
  CHECK(cgroup_memory_limit_bytes(v1, root) == 1610612736ULL);
  put("memory/memory.limit_in_bytes", "1073741824\n");  // the lower one holds
  CHECK(cgroup_memory_limit_bytes(v1, root) == 1073741824ULL);
  CHECK(cgroup_memory_limit_bytes("4:cpu:/box/job\n", root) == 0);  // no memory controller named
  const std::string v2 = "0::/user.slice/run-1.scope\n";
  put("user.slice/run-1.scope/memory.max", "max\n");
  CHECK(cgroup_memory_limit_bytes(v2, root) == 0);
  put("user.slice/run-1.scope/memory.max", "536870912\n");
  CHECK(cgroup_memory_limit_bytes(v2, root) == 536870912ULL);
  put("user.slice/run-1.scope/memory.max", "12x\n");  // not a number: not a limit
  CHECK(cgroup_memory_limit_bytes(v2, root) == 0);
  put("user.slice/memory.max", "402653184\n");  // a parent's limit holds below it
  CHECK(cgroup_memory_limit_bytes(v2, root) == 402653184ULL);
  put("memory.max", "268435456\n");  // a container that sees its cgroup as the root
  CHECK(cgroup_memory_limit_bytes(v2, root) == 268435456ULL);
  CHECK(cgroup_memory_limit_bytes("", root) == 0);
}

// A worker thread that cannot start is an error naming data.workers, not an
// abort: in a child process whose address space is capped (no room for 256
// thread stacks), constructing the loader must throw qat::Error.
TEST_CASE("DataLoader: a worker thread that cannot start is an error and not an abort", "[data]") {
#if defined(__SANITIZE_ADDRESS__)
  WARN("skipped under AddressSanitizer: its shadow memory cannot live under an address-space cap");
  return;
#else
  const ImageFolder folder(testing::sample_data_dir() + "/val");
  TransformSpec spec;
  spec.image_size = 32;
  spec.resize = 36;
  LoaderOptions opt;
  opt.workers = 256;
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::ifstream statm("/proc/self/statm");
    int64_t pages = 0;
    statm >> pages;
    const rlim_t cap = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + (rlim_t{64} << 20);
    const struct rlimit r{cap, cap};
    if (::setrlimit(RLIMIT_AS, &r) != 0) ::_exit(5);
    try {
      DataLoader loader(folder, spec, opt);
      ::_exit(2);  // every thread started: the cap did not bite
    } catch (const Error& e) {
      ::_exit(std::string(e.what()).find("use fewer data.workers") != std::string::npos ? 0 : 3);
    } catch (...) {
      ::_exit(4);
    }
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  INFO("child status " << status << (WIFSIGNALED(status) ? " (killed by a signal)" : ""));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
#endif
}

TEST_CASE("DataLoader: restart and destruction in the middle of an epoch", "[data]") {
  TempDir t;
  make_folder(t.dir / "ds", 2, 10, 16, 16);
  ImageFolder f((t.dir / "ds").string());
  TransformSpec s;
  s.image_size = 8;
  s.resize = 12;
  LoaderOptions o;
  o.batch_size = 2;
  o.workers = 3;
  o.prefetch = 3;
  o.seed = 7;
  std::vector<Batch> full;
  {
    DataLoader ref(f, s, o);
    full = run_epoch(ref, 2);
  }
  {
    DataLoader loader(f, s, o);
    loader.start_epoch(5);
    Batch b;
    REQUIRE(loader.next(b));
    require_same_batches(full, run_epoch(loader, 2));  // restart mid-epoch: a clean epoch 2
    loader.start_epoch(3);
    REQUIRE(loader.next(b));
  }  // destroyed with workers busy
  {
    DataLoader idle(f, s, o);  // never started
    Batch b;
    REQUIRE_THROWS_WITH(idle.next(b), Contains("start_epoch"));
  }
  LoaderOptions bad = o;
  bad.batch_size = 0;
  REQUIRE_THROWS_WITH(DataLoader(f, s, bad), Contains("batch_size"));
  bad = o;
  bad.batch_size = 100;
  bad.drop_last = true;
  REQUIRE_THROWS_WITH(DataLoader(f, s, bad), Contains("drop_last"));
}

// ---------------------------------------------------------------- subset + sample

TEST_CASE("make_subset: counts, sizes, seeded choice, errors", "[data]") {
  TempDir t;
  make_folder(t.dir / "src" / "train", 3, 6, 20, 30);
  make_folder(t.dir / "src" / "val", 3, 4, 30, 20);
  const std::string src = (t.dir / "src").string();
  auto r = make_subset(src, t.file("out"), 2, 1, 10, 9, 2);
  REQUIRE(r.classes == 3);
  REQUIRE(r.train_images == 6);
  REQUIRE(r.val_images == 3);
  ImageFolder tr(t.file("out/train")), va(t.file("out/val"));
  REQUIRE(tr.classes() == std::vector<std::string>{"c0", "c1", "c2"});
  REQUIRE(tr.size() == 6);
  REQUIRE(va.size() == 3);
  for (int64_t i = 0; i < tr.size(); ++i) {
    Image img = *tr.load(i);
    REQUIRE(std::min(img.height, img.width) == 10);
  }
  // same seed, one thread: the same files, the same bytes
  make_subset(src, t.file("again"), 2, 1, 10, 9, 1);
  ImageFolder tr2(t.file("again/train"));
  for (int64_t i = 0; i < tr.size(); ++i) {
    REQUIRE(fs::path(tr.path(i)).filename() == fs::path(tr2.path(i)).filename());
    REQUIRE(tr.load(i)->rgb == tr2.load(i)->rgb);
  }
  // another seed picks other files somewhere
  make_subset(src, t.file("other"), 2, 1, 10, 10, 1);
  ImageFolder tr3(t.file("other/train"));
  bool differs = false;
  for (int64_t i = 0; i < tr.size(); ++i)
    differs |= fs::path(tr.path(i)).filename() != fs::path(tr3.path(i)).filename();
  REQUIRE(differs);

  REQUIRE_THROWS_WITH(make_subset(src, t.file("out"), 2, 1, 10, 9), Contains("not an empty folder"));
  // An output inside the source would add its images to the source's classes.
  REQUIRE_THROWS_WITH(make_subset(src, t.file("src/train/small"), 1, 1, 10, 9), Contains("is inside the source"));
  REQUIRE_THROWS_WITH(make_subset(src, t.file("src"), 1, 1, 10, 9), Contains("is inside the source"));
  fs::create_directory_symlink(t.dir / "src" / "val", t.dir / "into_src");
  REQUIRE_THROWS_WITH(make_subset(src, t.file("into_src/new"), 1, 1, 10, 9), Contains("is inside the source"));
  CHECK(ImageFolder(src + "/train").classes() == std::vector<std::string>{"c0", "c1", "c2"});
  REQUIRE_THROWS_WITH(make_subset(src, t.file("x"), 7, 1, 10, 9), Contains("fewer than the 7"));
  REQUIRE_THROWS_WITH(make_subset(t.file("nosrc"), t.file("y"), 1, 1, 10, 9), Contains("nosrc"));
  // An existing empty folder keeps its permissions; a link to one is followed.
  fs::create_directories(t.dir / "kept");
  fs::permissions(t.dir / "kept", fs::perms::owner_all | fs::perms::group_all | fs::perms::set_gid);
  make_subset(src, t.file("kept"), 1, 1, 10, 9, 1);
  CHECK((fs::status(t.dir / "kept").permissions() & fs::perms::set_gid) == fs::perms::set_gid);
  CHECK(ImageFolder(t.file("kept/train")).size() == 3);
  fs::create_directories(t.dir / "elsewhere");
  fs::create_directory_symlink(t.dir / "elsewhere", t.dir / "link");
  make_subset(src, t.file("link"), 1, 1, 10, 9, 1);
  CHECK(fs::is_symlink(t.dir / "link"));
  CHECK(ImageFolder(t.file("elsewhere/val")).size() == 3);
  // Sizes qat would refuse to read back are refused before anything is written.
  REQUIRE_THROWS_WITH(make_subset(src, t.file("huge"), 2, 1, 100000, 9),
                      Contains("size 100000") && Contains("data.max_image_pixels"));
  // (one thread: the first image refused is a 20 x 30 training image; with two, either split's could be)
  REQUIRE_THROWS_WITH(make_subset(src, t.file("huge"), 2, 1, 7000, 9, 1),  // 7000 x 10500 from 20 x 30
                      Contains("resized to a shorter side of 7000 has 73500000 pixels, more than "
                               "data.max_image_pixels (67108864 by default)") &&
                          Contains("data.max_image_pixels"));
  REQUIRE_FALSE(fs::exists(t.file("huge")));
  // A corrupt source image: an error naming it, and no half-written subset.
  for (const char* c : {"c0", "c1", "c2"})
    std::ofstream(t.file("src/val/" + std::string(c) + "/zz_cut.jpg"), std::ios::binary) << "\xFF\xD8\xFF";
  REQUIRE_THROWS_WITH(make_subset(src, t.file("cut/"), 2, 5, 10, 9, 2), Contains("zz_cut.jpg"));
  for (const auto& e : fs::directory_iterator(t.dir)) {
    INFO(e.path());
    REQUIRE(e.path().filename().string().rfind("cut", 0) != 0);
  }
  // Into an existing empty folder: left empty again.
  fs::create_directories(t.dir / "empty");
  REQUIRE_THROWS_WITH(make_subset(src, t.file("empty"), 2, 5, 10, 9, 2), Contains("zz_cut.jpg"));
  REQUIRE(fs::is_empty(t.dir / "empty"));
}

// A full disk used to give empty JPEGs and success: a write that fails (here
// a file size cap, EFBIG) is an error naming the file, and the output folder
// is left as it was.
TEST_CASE("make_subset: a failed write is an error naming the file, no half subset left", "[data]") {
  TempDir t;
  make_folder(t.dir / "src" / "train", 2, 3, 40, 40);
  make_folder(t.dir / "src" / "val", 2, 2, 40, 40);
  const std::string src = t.file("src"), out = t.file("out");
  fs::create_directories(t.dir / "empty");
  for (const std::string& dest : {out, t.file("empty")}) {
    INFO(dest);
    REQUIRE(with_file_size_cap(300, [&] {
              return error_with([&] { make_subset(src, dest, 2, 1, 32, 0, 2); },
                                {"write_jpeg: cannot write '" + dest + "/.tmp-subset-", ".jpg': File too large"});
            }) == 0);
  }
  REQUIRE_FALSE(fs::exists(out));
  REQUIRE(fs::is_empty(t.dir / "empty"));
  // A dangling link among the source images is named, not dropped.
  fs::remove(t.dir / "src" / "val" / "c0" / "img1.png");
  fs::create_symlink(t.dir / "gone.png", t.dir / "src" / "val" / "c0" / "img1.png");
  REQUIRE_THROWS_WITH(make_subset(src, out, 2, 2, 32, 0, 1),
                      Contains("'" + t.file("src/val/c0/img1.png") + "' is a dangling symbolic link"));
  REQUIRE_FALSE(fs::exists(out));
}

TEST_CASE("the committed sample data/samples/imagenette-mini loads: 10 classes, 300 train, 100 val", "[data]") {
  const std::string root = std::string(QAT_SOURCE_DIR) + "/data/samples/imagenette-mini";
  ImageFolder train(root + "/train"), val(root + "/val");
  REQUIRE(train.num_classes() == 10);
  REQUIRE(val.classes() == train.classes());
  REQUIRE(train.classes().front() == "n01440764");
  REQUIRE(train.size() == 300);
  REQUIRE(val.size() == 100);
  for (int32_t c = 0; c < 10; ++c) {
    REQUIRE(train.indices_of(c).size() == 30);
    REQUIRE(val.indices_of(c).size() == 10);
  }
  TransformSpec s;
  s.image_size = 64;
  s.resize = 72;
  LoaderOptions o;
  o.batch_size = 50;
  o.workers = 2;
  o.train = false;
  o.shuffle = false;
  DataLoader loader(val, s, o);
  auto batches = run_epoch(loader, 0);
  REQUIRE(batches.size() == 2);
  for (const auto& b : batches) {
    REQUIRE(b.images.sizes() == Shape{50, 3, 64, 64});
    for (float v : b.images.to_vector()) REQUIRE(std::isfinite(v));
  }
  REQUIRE(std::min(train.load(0)->height, train.load(0)->width) == 80);
}

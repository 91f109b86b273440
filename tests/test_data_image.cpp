// tests/test_data_image.cpp: CIFAR binary readers and image folders on files written here in the
// real formats (and broken on purpose), normalization, and a subset of the real CIFAR-10 JPEGs.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include "data/cifar.h"
#include "data/image.h"
#include "data/image_codec.h"
#include "data/image_folder.h"
#include "tests/test_data_helpers.h"
#include "tests/helpers.h"

using Catch::Contains;
using data::CifarKind;
using test::error_of;
using test::TempDir;
using test::write_file;

// The pixel a test record r carries at plane c, position i: easy to recompute.
static uint8_t pattern(int64_t r, int c, int i) { return (uint8_t)((i * 7 + c * 50 + r * 13) & 255); }

// `count` CIFAR records; labels[r] (and coarse[r] for CIFAR-100) as given.
static std::vector<uint8_t> cifar_records(CifarKind kind, int64_t first, const std::vector<int>& labels,
                                          const std::vector<int>& coarse = {}) {
    std::vector<uint8_t> out;
    for (size_t k = 0; k < labels.size(); k++) {
        if (kind == CifarKind::Cifar100) out.push_back((uint8_t)coarse[k]);
        out.push_back((uint8_t)labels[k]);
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < 1024; i++) out.push_back(pattern(first + (int64_t)k, c, i));
    }
    return out;
}

static void check_pattern(const data::ImageSet& set, int64_t i, int64_t r) {
    for (int p = 0; p < 1024; p += 37)
        for (int c = 0; c < 3; c++) REQUIRE(set.image(i)[p * 3 + c] == pattern(r, c, p));
}

TEST_CASE("cifar10: binary batches, planar to HWC, labels and class names", "[data]") {
    TempDir dir;
    std::string bin = dir / "cifar-10-batches-bin";
    for (int b = 1; b <= 5; b++)
        write_file(bin + "/data_batch_" + std::to_string(b) + ".bin",
                   cifar_records(CifarKind::Cifar10, (b - 1) * 3, {b, b + 1, 9}));
    write_file(bin + "/test_batch.bin", cifar_records(CifarKind::Cifar10, 100, {0, 3}));
    // The parent folder and the batches folder both work.
    for (const std::string& root : {dir.path(), bin}) {
        auto train = data::load_cifar(CifarKind::Cifar10, root, "train");
        REQUIRE(train.n == 15);
        CHECK(train.h == 32);
        CHECK(train.labels[0] == 1);
        CHECK(train.labels[4] == 3);
        CHECK(train.labels[14] == 9);
        for (int64_t i = 0; i < 15; i++) check_pattern(train, i, i);
        CHECK(train.classes[0] == "airplane");
        CHECK(train.class_counts()[9] == 5);
    }
    write_file(bin + "/batches.meta.txt", "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n\n");
    auto test = data::load_cifar(CifarKind::Cifar10, dir.path(), "test");
    CHECK(test.n == 2);
    CHECK(test.classes[3] == "d");
    check_pattern(test, 1, 101);
    // CRLF line endings are names without the \r; a list of nine is an error naming the file.
    write_file(bin + "/batches.meta.txt", "a\r\nb\r\nc\r\nd\r\ne\r\nf\r\ng\r\nh\r\ni\r\nj\r\n");
    CHECK(data::load_cifar(CifarKind::Cifar10, dir.path(), "test").classes[9] == "j");
    write_file(bin + "/batches.meta.txt", "a\nb\nc\nd\ne\nf\ng\nh\ni\n");
    CHECK_THAT(error_of([&] { data::load_cifar(CifarKind::Cifar10, dir.path(), "test"); }),
               Contains("batches.meta.txt") && Contains("9 class names, expected 10"));
}

TEST_CASE("cifar100: coarse and fine labels", "[data]") {
    TempDir dir;
    std::string bin = dir / "cifar-100-binary";
    write_file(bin + "/train.bin", cifar_records(CifarKind::Cifar100, 0, {99, 5, 42}, {19, 0, 7}));
    write_file(bin + "/test.bin", cifar_records(CifarKind::Cifar100, 0, {1}, {2}));
    auto train = data::load_cifar(CifarKind::Cifar100, dir.path(), "train");
    REQUIRE(train.n == 3);
    CHECK(train.labels == std::vector<int32_t>{99, 5, 42});
    CHECK(train.coarse_labels == std::vector<int32_t>{19, 0, 7});
    CHECK(train.num_classes() == 100);
    CHECK(train.coarse_classes.size() == 20);
    check_pattern(train, 2, 2);
    auto labels = data::labels_tensor(train, {2, 0}, true);
    CHECK(labels.to_vector() == std::vector<float>{7, 19});
}

TEST_CASE("cifar: bad files fail naming the file and the problem", "[data]") {
    TempDir dir;
    std::string f = dir / "test_batch.bin";
    CHECK_THAT(error_of([&] { data::load_cifar(CifarKind::Cifar10, dir / "missing", "test"); }),
               Contains("missing") && Contains("does not exist") && Contains("download.sh cifar10"));
    CHECK_THAT(error_of([&] { data::load_cifar(CifarKind::Cifar10, dir.path(), "test"); }),
               Contains(f) && Contains("missing file"));

    auto good = cifar_records(CifarKind::Cifar10, 0, {1, 2, 3});
    auto truncated = good;
    truncated.resize(good.size() - 100);
    write_file(f, truncated);
    CHECK_THAT(error_of([&] { data::load_cifar(CifarKind::Cifar10, dir.path(), "test"); }),
               Contains(f) && Contains("not a whole number") && Contains("truncated"));

    // A CIFAR-100 file where CIFAR-10 is expected: the record size gives it away.
    write_file(f, cifar_records(CifarKind::Cifar100, 0, {1, 2}, {0, 0}));
    CHECK_THAT(error_of([&] { data::load_cifar(CifarKind::Cifar10, dir.path(), "test"); }),
               Contains("3074-byte records"));

    auto bad_label = good;
    bad_label[3073] = 10;  // record 1's label
    write_file(f, bad_label);
    CHECK_THAT(error_of([&] { data::load_cifar(CifarKind::Cifar10, dir.path(), "test"); }),
               Contains(f) && Contains("record 1") && Contains("label 10 outside [0, 10)"));

    write_file(f, std::string());
    CHECK_THAT(error_of([&] { data::load_cifar(CifarKind::Cifar10, dir.path(), "test"); }), Contains("empty"));

    auto c100 = cifar_records(CifarKind::Cifar100, 0, {1, 2}, {3, 20});
    data::ImageSet set;
    CHECK_THAT(error_of([&] { data::parse_cifar(c100.data(), c100.size(), CifarKind::Cifar100, "x.bin", set); }),
               Contains("x.bin") && Contains("coarse label 20"));
    CHECK(set.n == 0);  // a bad file leaves the set untouched
    CHECK(set.labels.empty());
    c100[1] = 100;
    CHECK_THAT(error_of([&] { data::parse_cifar(c100.data(), c100.size(), CifarKind::Cifar100, "x.bin", set); }),
               Contains("label 100 outside [0, 100)"));

    // A fine class in two coarse classes: in one file (naming both records), or against a file
    // read before into the same set; consistent files append.
    auto split = cifar_records(CifarKind::Cifar100, 0, {5, 7, 5}, {0, 1, 3});
    CHECK_THAT(error_of([&] { data::parse_cifar(split.data(), split.size(), CifarKind::Cifar100, "x.bin", set); }),
               Contains("x.bin") && Contains("record 2") && Contains("fine label 5 with coarse label 3") &&
                   Contains("record 0 has it in coarse class 0"));
    CHECK(set.n == 0);
    auto first = cifar_records(CifarKind::Cifar100, 0, {5, 7}, {0, 1});
    auto second = cifar_records(CifarKind::Cifar100, 0, {7, 5}, {1, 0});
    data::parse_cifar(first.data(), first.size(), CifarKind::Cifar100, "a.bin", set);
    data::parse_cifar(second.data(), second.size(), CifarKind::Cifar100, "b.bin", set);
    CHECK(set.n == 4);
    auto clash = cifar_records(CifarKind::Cifar100, 0, {7}, {4});
    CHECK_THAT(error_of([&] { data::parse_cifar(clash.data(), clash.size(), CifarKind::Cifar100, "c.bin", set); }),
               Contains("c.bin") && Contains("fine label 7 with coarse label 4") &&
                   Contains("the files before has it in coarse class 1"));
    CHECK(set.n == 4);
}

// A w x h image whose pixels depend on (seed, y, x, c).
static std::vector<uint8_t> test_image(int h, int w, int seed) {
    std::vector<uint8_t> img((size_t)h * w * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                img[((size_t)y * w + x) * 3 + c] = (uint8_t)(seed * 31 + y * 5 + x * 3 + c * 80);
    return img;
}

TEST_CASE("image folder: PNG exact, JPEG close, sorted classes and files", "[data]") {
    TempDir dir;
    std::string split = dir / "train";
    // Classes written out of order: labels follow sorted names.
    for (std::string cls : {"zebra", "ant"})
        for (int k = 0; k < 3; k++) {
            int seed = (cls == "ant" ? 0 : 10) + k;
            auto img = test_image(8, 6, seed);
            data::write_png(test::made_parent(split + "/" + cls + "/" + std::to_string(k) + ".png"), img.data(), 8, 6);
        }
    write_file(split + "/ant/notes.txt", "not an image, ignored");
    write_file(split + "/ant/._0.png", "macOS metadata beside a copied file, not a PNG: skipped");
    auto set = data::load_image_folder(split);
    REQUIRE(set.n == 6);
    CHECK(set.classes == std::vector<std::string>{"ant", "zebra"});
    CHECK(set.h == 8);
    CHECK(set.w == 6);
    CHECK(set.labels == std::vector<int32_t>{0, 0, 0, 1, 1, 1});
    for (int64_t i = 0; i < 6; i++) {
        auto want = test_image(8, 6, (i < 3 ? 0 : 10) + (int)(i % 3));
        CHECK(std::equal(want.begin(), want.end(), set.image(i)));
    }
    CHECK(data::list_splits(dir.path()) == std::vector<std::string>{"train"});

    data::FolderOptions two;
    two.max_per_class = 2;
    two.threads = 1;
    CHECK(data::load_image_folder(split, two).n == 4);

    // JPEG is lossy: a smooth image comes back close.
    std::vector<uint8_t> smooth(16 * 16 * 3);
    for (int p = 0; p < 256; p++)
        for (int c = 0; c < 3; c++) smooth[p * 3 + c] = (uint8_t)(60 + (p % 16) * 4 + c * 30);
    TempDir jdir;
    data::write_jpeg(test::made_parent(jdir / "s/a/x.JPG"), smooth.data(), 16, 16, 95);
    auto j = data::load_image_folder(jdir / "s");
    REQUIRE(j.n == 1);
    double err = 0;
    for (size_t k = 0; k < smooth.size(); k++) err = test::max_err(err, std::fabs((double)j.pixels[k] - smooth[k]));
    CHECK(err <= 12);
}

TEST_CASE("image folder: resize, mixed sizes, undecodable and empty inputs", "[data]") {
    TempDir dir;
    std::vector<uint8_t> red(10 * 12 * 3);
    for (size_t p = 0; p < red.size(); p += 3) { red[p] = 200; red[p + 1] = 10; red[p + 2] = 40; }
    data::write_png(test::made_parent(dir / "s/a/0.png"), red.data(), 10, 12);
    auto small = test_image(4, 4, 1);
    data::write_png(test::made_parent(dir / "s/b/0.png"), small.data(), 4, 4);

    CHECK_THAT(error_of([&] { data::load_image_folder(dir / "s"); }),
               Contains(dir / "s/b/0.png") && Contains("4x4") && Contains("resize"));

    data::FolderOptions resize;
    resize.height = 5;
    resize.width = 6;
    auto set = data::load_image_folder(dir / "s", resize);
    REQUIRE(set.h == 5);
    REQUIRE(set.w == 6);
    for (int p = 0; p < 30; p++) {  // a constant image stays constant
        CHECK(set.image(0)[p * 3] == 200);
        CHECK(set.image(0)[p * 3 + 2] == 40);
    }

    write_file(dir / "s/b/1.jpg", "this is not a jpeg");
    CHECK_THAT(error_of([&] { data::load_image_folder(dir / "s", resize); }),
               Contains(dir / "s/b/1.jpg") && Contains("cannot decode"));
    auto png = data::encode_png(small.data(), 4, 4);
    png.resize(png.size() / 2);  // truncated PNG
    write_file(dir / "s/b/1.jpg", png);
    CHECK_THAT(error_of([&] { data::load_image_folder(dir / "s", resize); }), Contains(dir / "s/b/1.jpg"));
    write_file(dir / "s/b/1.jpg", std::string());
    CHECK_THAT(error_of([&] { data::load_image_folder(dir / "s", resize); }), Contains("empty file"));
    std::filesystem::remove(dir / "s/b/1.jpg");

    std::filesystem::create_directories(dir / "s/c");
    CHECK_THAT(error_of([&] { data::load_image_folder(dir / "s", resize); }),
               Contains(dir / "s/c") && Contains("no .jpg"));
    CHECK_THAT(error_of([&] { data::load_image_folder(dir / "nothing"); }), Contains("does not exist"));
    std::filesystem::create_directories(dir / "flat");
    CHECK_THAT(error_of([&] { data::load_image_folder(dir / "flat"); }), Contains("no class sub-folders"));

    int h, w;
    std::vector<uint8_t> garbage = {0xff, 0xd8, 0xff, 0xe0, 0, 16, 'J', 'F', 'I', 'F', 0};
    CHECK_THAT(error_of([&] { data::decode_image(garbage.data(), garbage.size(), "g.jpg", h, w); }), Contains("g.jpg"));
    CHECK_THAT(error_of([&] { data::decode_image(png.data(), png.size(), "big.png", h, w, 8); }),
               Contains("outside 1..8 pixels"));
}

TEST_CASE("normalize: images to [B,3,H,W] with (x/255 - mean)/std", "[data]") {
    data::ImageSet set;
    set.source = "test";
    set.n = 2;
    set.h = 3;
    set.w = 2;
    set.classes = {"a", "b"};
    set.labels = {1, 0};
    set.pixels.resize(2 * 3 * 2 * 3);
    for (size_t k = 0; k < set.pixels.size(); k++) set.pixels[k] = (uint8_t)(k * 7);
    set.check_consistent();
    auto norm = data::cifar10_normalize();
    auto t = data::images_tensor(set, {1, 0}, norm);
    REQUIRE(t.shape() == engine::Shape{2, 3, 3, 2});
    for (int b = 0; b < 2; b++)
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 3; y++)
                for (int x = 0; x < 2; x++) {
                    int img = 1 - b;
                    double v = set.pixels[((img * 3 + y) * 2 + x) * 3 + c] / 255.0;
                    CHECK(t.at({b, c, y, x}) == Approx((v - norm.mean[c]) / norm.std[c]).epsilon(1e-5));
                }
    CHECK(data::labels_tensor(set, {1, 0}).to_vector() == std::vector<float>{0, 1});
    CHECK_THROWS_AS(data::images_tensor(set, {2}, norm), engine::Error);
    auto m = data::measure_normalize(set);
    double mean0 = 0;
    for (int p = 0; p < 12; p++) mean0 += set.pixels[p * 3] / 255.0;
    CHECK(m.mean[0] == Approx(mean0 / 12).epsilon(1e-5));

    set.labels[0] = 2;
    CHECK_THAT(error_of([&] { set.check_consistent(); }), Contains("label 2 outside [0, 2)"));
}

TEST_CASE("real data: CIFAR-10 JPEG folder (a subset of the test split)", "[data]") {
    std::string root = test::real_data_dir("CIFAR-10 JPEG folder");
    if (root.empty()) return;
    data::FolderOptions opt;
    opt.max_per_class = 20;
    auto set = data::load_image_folder(root + "/cifar10-jpeg/test", opt);
    CHECK(set.n == 200);
    CHECK(set.h == 32);
    CHECK(set.w == 32);
    CHECK(set.classes == std::vector<std::string>{"airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                                                  "horse", "ship", "truck"});
    auto m = data::measure_normalize(set);
    for (int c = 0; c < 3; c++) {  // near the published CIFAR-10 statistics
        CHECK(std::fabs(m.mean[c] - data::cifar10_normalize().mean[c]) < 0.06);
        CHECK(std::fabs(m.std[c] - data::cifar10_normalize().std[c]) < 0.06);
    }
    CHECK(data::list_splits(root + "/cifar10-jpeg") == std::vector<std::string>{"test", "train"});
}

TEST_CASE("decode: a JPEG Huffman table with more than 256 codes is refused before stb sees it", "[data]") {
    // stb_image 2.27 would write past its tables (found by fuzz/fuzz_image).
    auto img = test_image(8, 8, 2);
    auto jpg = data::encode_jpeg(img.data(), 8, 8, 90);
    int h = 0, w = 0;
    REQUIRE(data::decode_image(jpg.data(), jpg.size(), "ok.jpg", h, w).size() == 8 * 8 * 3);
    size_t dht = 0;
    for (size_t i = 2; i + 1 < jpg.size() && !dht; i++)
        if (jpg[i] == 0xFF && jpg[i + 1] == 0xC4) dht = i;
    REQUIRE(dht > 0);
    jpg[dht + 5] = 200;  // code counts of the first table (bytes 5..20 of the segment)
    jpg[dht + 6] = 200;
    CHECK_THAT(error_of([&] { data::decode_image(jpg.data(), jpg.size(), "evil.jpg", h, w); }),
               Contains("evil.jpg") && Contains("Huffman table"));
    // stb skips 0xFF fill bytes before the start marker, so the check must too.
    jpg.insert(jpg.begin(), 5, 0xFF);
    CHECK_THAT(error_of([&] { data::decode_image(jpg.data(), jpg.size(), "padded.jpg", h, w); }),
               Contains("Huffman table"));
}

TEST_CASE("image folder: the Tiny-ImageNet layout (class/images/, val_annotations.txt)", "[data]") {
    TempDir dir;
    auto a = test_image(4, 4, 1), b = test_image(4, 4, 2);
    data::write_png(test::made_parent(dir / "train/n02/images/n02_0.JPEG"), b.data(), 4, 4);
    data::write_png(test::made_parent(dir / "train/n01/images/n01_0.JPEG"), a.data(), 4, 4);
    write_file(dir / "train/n01/n01_boxes.txt", "n01_0.JPEG\t0\t0\t3\t3\n");
    auto train = data::load_image_folder(dir / "train");
    CHECK(train.classes == std::vector<std::string>{"n01", "n02"});
    CHECK(train.labels == std::vector<int32_t>{0, 1});
    CHECK(std::equal(b.begin(), b.end(), train.image(1)));

    data::write_png(test::made_parent(dir / "val/images/val_0.JPEG"), b.data(), 4, 4);
    data::write_png(test::made_parent(dir / "val/images/val_1.JPEG"), a.data(), 4, 4);
    data::write_png(test::made_parent(dir / "val/images/val_2.JPEG"), a.data(), 4, 4);
    write_file(dir / "val/val_annotations.txt", "val_1.JPEG\tn01\t0\t0\t3\t3\r\nval_0.JPEG\tn02\t1\t1\t2\t2\n"
                                                "val_2.JPEG\tn01\t0\t0\t1\t1\n");
    auto val = data::load_image_folder(dir / "val");
    CHECK(val.classes == train.classes);
    CHECK(val.labels == std::vector<int32_t>{1, 0, 0});  // files in sorted order: val_0, val_1, val_2
    CHECK(std::equal(b.begin(), b.end(), val.image(0)));
    data::FolderOptions one;
    one.max_per_class = 1;
    CHECK(data::load_image_folder(dir / "val", one).n == 2);

    write_file(dir / "val/val_annotations.txt", "val_1.JPEG n01\n");
    CHECK_THAT(error_of([&] { data::load_image_folder(dir / "val"); }),
               Contains("val_annotations.txt") && Contains("line 1"));
    write_file(dir / "val/val_annotations.txt", "val_9.JPEG\tn01\t0\n");
    CHECK_THAT(error_of([&] { data::load_image_folder(dir / "val"); }), Contains("val_9.JPEG") && Contains("no such"));
    // A file listed twice is refused, naming both lines and labels (it would count twice).
    write_file(dir / "val/val_annotations.txt", "val_1.JPEG\tn01\t0\nval_0.JPEG\tn02\t0\nval_1.JPEG\tn02\t0\n");
    CHECK_THAT(error_of([&] { data::load_image_folder(dir / "val"); }),
               Contains("val_annotations.txt") && Contains("val_1.JPEG is listed twice") &&
                   Contains("lines 1 and 3") && Contains("classes n01 and n02"));
}

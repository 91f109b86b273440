// tests/test_data_loader.cpp: the threaded image loader: every image once per epoch, batches
// independent of the number of threads, early stops and restarts without hangs, and errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include "data/loader.h"
#include "tests/test_data_helpers.h"

using data::ImageBatch;
using data::ImageLoader;
using data::LoaderOptions;
using test::error_of;

// n images of 6x5 whose pixels encode their index; label = index % classes.
static data::ImageSet small_set(int64_t n, int classes = 3) {
    data::ImageSet s;
    s.source = "test set";
    s.n = n;
    s.h = 6;
    s.w = 5;
    for (int k = 0; k < classes; k++) s.classes.push_back(fmt::format("c{}", k));
    s.pixels.resize(n * s.image_bytes());
    for (int64_t i = 0; i < n; i++) {
        s.labels.push_back((int32_t)(i % classes));
        for (int64_t b = 0; b < s.image_bytes(); b++) s.image(i)[b] = (uint8_t)((i * 11 + b) & 255);
    }
    return s;
}

static std::vector<ImageBatch> read_epoch(ImageLoader& loader, int64_t epoch) {
    loader.start_epoch(epoch);
    std::vector<ImageBatch> out;
    ImageBatch b;
    while (loader.next(b)) out.push_back(b);
    return out;
}

static bool same(const ImageBatch& a, const ImageBatch& b) {
    return a.indices == b.indices && a.images.shape() == b.images.shape() &&
           std::memcmp(a.images.data_f32(), b.images.data_f32(), a.images.numel() * sizeof(float)) == 0 &&
           a.labels.to_vector() == b.labels.to_vector();
}

TEST_CASE("loader: every image once per epoch, shuffled per epoch, shapes and labels", "[data]") {
    auto set = small_set(23);
    LoaderOptions opt;
    opt.batch_size = 5;
    opt.normalize = data::cifar10_normalize();
    opt.seed = 4;
    ImageLoader loader(set, opt);
    REQUIRE(loader.batches_per_epoch() == 5);
    std::vector<int64_t> orders[2];
    for (int64_t epoch = 0; epoch < 2; epoch++) {
        auto batches = read_epoch(loader, epoch);
        REQUIRE(batches.size() == 5);
        for (size_t k = 0; k < batches.size(); k++) {
            const ImageBatch& b = batches[k];
            int64_t n = k < 4 ? 5 : 3;
            REQUIRE(b.images.shape() == engine::Shape{n, 3, 6, 5});
            REQUIRE(b.labels.shape() == engine::Shape{n});
            CHECK(b.index == (int64_t)k);
            CHECK(b.epoch == epoch);
            for (int64_t i = 0; i < n; i++) {
                CHECK(b.labels.data_i32()[i] == set.labels[b.indices[i]]);
                // No augmentation: the normalized image itself.
                auto want = data::images_tensor(set, {b.indices[i]}, opt.normalize);
                CHECK(std::memcmp(want.data_f32(), b.images.data_f32() + i * 90, 90 * sizeof(float)) == 0);
            }
            orders[epoch].insert(orders[epoch].end(), b.indices.begin(), b.indices.end());
        }
        std::vector<int64_t> sorted = orders[epoch];
        std::sort(sorted.begin(), sorted.end());
        for (int64_t i = 0; i < 23; i++) REQUIRE(sorted[i] == i);
    }
    CHECK(orders[0] != orders[1]);

    opt.drop_last = true;
    opt.shuffle = false;
    ImageLoader in_order(set, opt);
    auto batches = read_epoch(in_order, 0);
    REQUIRE(batches.size() == 4);
    CHECK(batches[1].indices == std::vector<int64_t>{5, 6, 7, 8, 9});
}

TEST_CASE("loader: batches do not depend on the number of workers or on make_batch", "[data]") {
    auto set = small_set(40);
    LoaderOptions opt;
    opt.batch_size = 6;
    opt.seed = 11;
    opt.augment = data::cifar_augment(2, 9);
    opt.augment.cutout = 3;
    opt.workers = 0;
    ImageLoader serial(set, opt);
    auto want = read_epoch(serial, 3);
    for (int workers : {1, 3}) {
        opt.workers = workers;
        opt.prefetch = 2;
        ImageLoader threaded(set, opt);
        auto got = read_epoch(threaded, 3);
        REQUIRE(got.size() == want.size());
        for (size_t k = 0; k < got.size(); k++) CHECK(same(got[k], want[k]));
        CHECK(same(threaded.make_batch(3, 2), want[2]));
    }
    // Augmentation is on: each image comes out unlike the plain image, and unlike itself in another
    // epoch (the epochs are shuffled differently, so images are matched by index, not by place).
    auto pixels_by_index = [&](const std::vector<ImageBatch>& epoch) {
        std::map<int64_t, std::vector<float>> out;
        for (const ImageBatch& b : epoch) {
            const int64_t size = b.images.numel() / b.images.size(0);
            for (size_t i = 0; i < b.indices.size(); i++)
                out[b.indices[i]].assign(b.images.data_f32() + i * size, b.images.data_f32() + (i + 1) * size);
        }
        return out;
    };
    auto epoch3 = pixels_by_index(want), epoch4 = pixels_by_index(read_epoch(serial, 4));
    REQUIRE(epoch3.size() == 40);
    REQUIRE(epoch4.size() == 40);
    int unlike_plain = 0, unlike_other_epoch = 0;
    for (auto& [index, image] : epoch3) {
        auto plain = data::images_tensor(set, {index}, opt.normalize);
        unlike_plain += image != std::vector<float>(plain.data_f32(), plain.data_f32() + plain.numel());
        unlike_other_epoch += image != epoch4.at(index);
    }
    CHECK(unlike_plain >= 36);  // a draw may leave an image as it was now and then, not often
    CHECK(unlike_other_epoch >= 36);
}

TEST_CASE("loader: stopping early, restarting epochs and destroying mid-epoch do not hang", "[data]") {
    auto set = small_set(200);
    LoaderOptions opt;
    opt.batch_size = 4;
    opt.workers = 3;
    opt.prefetch = 3;
    opt.augment = data::cifar_augment(1, 5);
    ImageLoader reference(set, opt);
    for (int round = 0; round < 20; round++) {
        ImageLoader loader(set, opt);
        loader.start_epoch(0);
        ImageBatch b;
        for (int k = 0; k < round % 4; k++) REQUIRE(loader.next(b));
        loader.start_epoch(1);  // abandon epoch 0 with batches in flight
        REQUIRE(loader.next(b));
        CHECK(same(b, reference.make_batch(1, 0)));
        REQUIRE(loader.next(b));
        CHECK(b.index == 1);
        // Destroyed here with workers blocked on a full queue.
    }
    ImageLoader never_started(set, opt);  // threads waiting for a first epoch
}

TEST_CASE("loader: bad options and misuse are errors", "[data]") {
    auto set = small_set(10);
    LoaderOptions opt;
    opt.batch_size = 0;
    CHECK_THAT(error_of([&] { ImageLoader l(set, opt); }), Catch::Contains("batch size"));
    opt.batch_size = 20;
    opt.drop_last = true;
    CHECK_THAT(error_of([&] { ImageLoader l(set, opt); }), Catch::Contains("no full batch"));
    opt.drop_last = false;
    for (int workers : {0, 2}) {
        opt.workers = workers;
        ImageLoader l(set, opt);
        ImageBatch b;
        CHECK_THAT(error_of([&] { l.next(b); }), Catch::Contains("start_epoch"));
        CHECK_THROWS_AS(l.make_batch(0, 1), engine::Error);
    }
    auto bad = small_set(10);
    bad.labels[3] = 7;
    CHECK_THAT(error_of([&] { ImageLoader l(bad, opt); }), Catch::Contains("label 7"));

    // An error while a batch is built (here RandAugment with one magnitude bin) reaches the caller
    // of next() with its message, from a worker thread as from the calling one, and the loader
    // can still be destroyed (its workers stop).
    opt.batch_size = 4;
    opt.augment.randaug.n = 1;
    opt.augment.randaug.bins = 1;
    for (int workers : {0, 2}) {
        INFO(workers << " workers");
        opt.workers = workers;
        ImageLoader l(set, opt);
        l.start_epoch(0);
        ImageBatch b;
        CHECK_THAT(error_of([&] { l.next(b); }), Catch::Contains("need at least 2 magnitude bins"));
    }
}

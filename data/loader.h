// data/loader.h: shuffled, augmented image batches, built by background threads ahead of the
// training step.
//
// The data set is decoded once (ImageSet, uint8 in memory); per batch the loader gathers the
// images of the epoch's order, augments them (data/augment.h), normalizes them into a float
// tensor [B,3,H,W] and returns int32 labels [B].
//
// Threads: `workers` threads claim batch indices in order and put the finished batches into a
// ring of `prefetch` slots; the consumer takes them in order. A worker never runs more than
// `prefetch` batches ahead of the consumer (bounded memory). Abandoning an epoch half-way
// (start_epoch again, or destroying the loader) is safe: in-flight batches of the old epoch are
// dropped, and the destructor wakes and joins every thread.
//
// Determinism: the order of epoch e is a permutation drawn from (seed, e); the augmentation of
// the sample at position p of epoch e from (seed, e, p). A batch is therefore the same whatever
// the number of workers, their timing, or whether it was built by make_batch() directly.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>
#include "data/augment.h"
#include "data/image.h"
#include "engine/tensor.h"

namespace data {

struct ImageBatch {
    engine::Tensor images;         // float32 [B,3,H,W], augmented and normalized
    engine::Tensor labels;         // int32 [B]
    engine::Tensor coarse_labels;  // int32 [B] when the set has coarse labels (CIFAR-100)
    std::vector<int64_t> indices;  // the images of the set, in batch order
    int64_t epoch = 0, index = 0;  // which batch of which epoch
};

struct LoaderOptions {
    int64_t batch_size = 128;
    bool shuffle = true;
    bool drop_last = false;   // drop the last, smaller batch
    AugmentOptions augment;   // none by default (evaluation)
    Normalize normalize;      // identity (x/255) by default; see cifar10_normalize()
    uint64_t seed = 0;
    int workers = 2;          // background threads; 0 builds each batch in next() on the caller's thread
    int prefetch = 4;         // batches built or being built ahead of the consumer
};

class ImageLoader {
public:
    // `set` must outlive the loader.
    ImageLoader(const ImageSet& set, const LoaderOptions& opt);
    ~ImageLoader();
    ImageLoader(const ImageLoader&) = delete;
    ImageLoader& operator=(const ImageLoader&) = delete;

    int64_t batches_per_epoch() const { return batches_; }
    const LoaderOptions& options() const { return opt_; }

    // Begin epoch `epoch` (any number, e.g. to resume); unread batches of the previous one are dropped.
    void start_epoch(int64_t epoch);
    // The next batch of the current epoch; false when the epoch is done. Rethrows a worker's error.
    bool next(ImageBatch& out);

    // Batch `index` of epoch `epoch`, built on the calling thread (what the workers run).
    ImageBatch make_batch(int64_t epoch, int64_t index) const;
    std::vector<int64_t> epoch_order(int64_t epoch) const;

private:
    ImageBatch build(int64_t epoch, int64_t index, const std::vector<int64_t>& order) const;
    void worker_loop();

    const ImageSet& set_;
    LoaderOptions opt_;
    NormalizeTable table_;
    int64_t batches_ = 0;

    std::mutex mu_;
    std::condition_variable work_cv_, ready_cv_;
    bool stop_ = false;
    bool started_ = false;
    int64_t generation_ = 0;  // bumped by start_epoch: results of older generations are stale
    int64_t epoch_ = 0;
    std::shared_ptr<const std::vector<int64_t>> order_;
    int64_t next_claim_ = 0, consumed_ = 0;
    struct Slot {
        int64_t index = -1;  // the batch it holds, -1 when empty
        std::optional<ImageBatch> batch;
        std::exception_ptr error;
    };
    std::vector<Slot> slots_;
    std::vector<std::thread> threads_;
};

}  // namespace data

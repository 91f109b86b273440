// data/loader.cpp: the threaded image loader (see loader.h).
#include "data/loader.h"

#include <algorithm>
#include <cstring>
#include "engine/error.h"

using engine::check;
using engine::DType;
using engine::Tensor;

namespace data {

ImageLoader::ImageLoader(const ImageSet& set, const LoaderOptions& opt)
    : set_(set), opt_(opt), table_(opt.normalize) {
    check(opt.batch_size > 0, "image loader: batch size must be positive, got {}", opt.batch_size);
    check(opt.workers >= 0 && opt.prefetch >= 1, "image loader: need workers >= 0 and prefetch >= 1, got {} and {}",
          opt.workers, opt.prefetch);
    check(set.n > 0, "image loader: {} has no images", set.source);
    set.check_consistent();
    batches_ = opt.drop_last ? set.n / opt.batch_size : (set.n + opt.batch_size - 1) / opt.batch_size;
    check(batches_ > 0, "image loader: {} images make no full batch of {} (drop_last)", set.n, opt.batch_size);
    slots_.resize(opt.prefetch);
    for (int i = 0; i < opt.workers; i++) threads_.emplace_back([this] { worker_loop(); });
}

ImageLoader::~ImageLoader() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
}

std::vector<int64_t> ImageLoader::epoch_order(int64_t epoch) const {
    std::vector<int64_t> order(set_.n);
    if (!opt_.shuffle) {
        for (int64_t i = 0; i < set_.n; i++) order[i] = i;
        return order;
    }
    // Position -1: a stream no sample's augmentation uses.
    engine::Generator g = sample_generator(opt_.seed, epoch, -1);
    std::vector<int32_t> perm = g.permutation((int32_t)set_.n);
    std::copy(perm.begin(), perm.end(), order.begin());
    return order;
}

ImageBatch ImageLoader::build(int64_t epoch, int64_t index, const std::vector<int64_t>& order) const {
    const int64_t start = index * opt_.batch_size;
    const int64_t b = std::min(opt_.batch_size, set_.n - start);
    const int h = set_.h, w = set_.w;
    const int64_t bytes = set_.image_bytes(), floats = 3 * (int64_t)h * w;
    ImageBatch out;
    out.epoch = epoch;
    out.index = index;
    out.indices.assign(order.begin() + start, order.begin() + start + b);
    out.images = Tensor::empty({b, 3, h, w});
    out.labels = Tensor::empty({b}, DType::I32);
    const bool coarse = !set_.coarse_labels.empty();
    if (coarse) out.coarse_labels = Tensor::empty({b}, DType::I32);
    std::vector<uint8_t> img(bytes), scratch(bytes);
    float* dst = out.images.data_f32();
    for (int64_t i = 0; i < b; i++) {
        int64_t src = out.indices[i];
        engine::Generator g = sample_generator(opt_.seed, epoch, start + i);
        const uint8_t* pixels = set_.image(src);
        if (opt_.augment.any_uint8()) {
            std::memcpy(img.data(), pixels, bytes);
            augment_uint8(img.data(), h, w, opt_.augment, g, scratch.data());
            pixels = img.data();
        }
        image_to_chw(pixels, h, w, table_, dst + i * floats);
        if (opt_.augment.any_float()) augment_float(dst + i * floats, h, w, opt_.augment, g);
        out.labels.data_i32()[i] = set_.labels[src];
        if (coarse) out.coarse_labels.data_i32()[i] = set_.coarse_labels[src];
    }
    return out;
}

ImageBatch ImageLoader::make_batch(int64_t epoch, int64_t index) const {
    check(index >= 0 && index < batches_, "image loader: batch {} out of range [0, {})", index, batches_);
    return build(epoch, index, epoch_order(epoch));
}

void ImageLoader::start_epoch(int64_t epoch) {
    auto order = std::make_shared<const std::vector<int64_t>>(epoch_order(epoch));
    {
        std::lock_guard<std::mutex> lk(mu_);
        generation_++;
        epoch_ = epoch;
        order_ = std::move(order);
        next_claim_ = 0;
        consumed_ = 0;
        started_ = true;
        for (Slot& s : slots_) s = Slot{};
    }
    work_cv_.notify_all();
}

void ImageLoader::worker_loop() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
        work_cv_.wait(lk, [&] {
            return stop_ || (started_ && next_claim_ < batches_ && next_claim_ < consumed_ + opt_.prefetch);
        });
        if (stop_) return;
        const int64_t index = next_claim_++, generation = generation_, epoch = epoch_;
        std::shared_ptr<const std::vector<int64_t>> order = order_;
        lk.unlock();
        std::optional<ImageBatch> batch;
        std::exception_ptr error;
        try {
            batch = build(epoch, index, *order);
        } catch (...) {
            error = std::current_exception();
        }
        lk.lock();
        if (generation != generation_) continue;  // the epoch was restarted meanwhile: drop it
        Slot& slot = slots_[index % opt_.prefetch];
        slot.index = index;
        slot.batch = std::move(batch);
        slot.error = error;
        ready_cv_.notify_all();
    }
}

bool ImageLoader::next(ImageBatch& out) {
    if (threads_.empty()) {
        check(started_, "image loader: call start_epoch() before next()");
        if (consumed_ >= batches_) return false;
        out = build(epoch_, consumed_, *order_);
        consumed_++;
        return true;
    }
    std::unique_lock<std::mutex> lk(mu_);
    check(started_, "image loader: call start_epoch() before next()");
    if (consumed_ >= batches_) return false;
    Slot& slot = slots_[consumed_ % opt_.prefetch];
    ready_cv_.wait(lk, [&] { return slot.index == consumed_; });
    std::exception_ptr error = slot.error;
    if (!error) out = std::move(*slot.batch);
    slot = Slot{};
    // An error ends the epoch: the batches after it are not waited for.
    consumed_ = error ? batches_ : consumed_ + 1;
    if (error) next_claim_ = batches_;
    lk.unlock();
    work_cv_.notify_all();
    if (error) std::rethrow_exception(error);
    return true;
}

}  // namespace data

// data/image_tensor.cpp: images and labels of an ImageSet as engine tensors (see image.h).
#include "data/image.h"

#include "engine/error.h"

using engine::check;
using engine::DType;
using engine::Tensor;

namespace data {

Tensor images_tensor(const ImageSet& set, const std::vector<int64_t>& indices, const Normalize& norm) {
    int64_t b = (int64_t)indices.size();
    Tensor out = Tensor::empty({b, 3, set.h, set.w});
    float* p = out.data_f32();
    for (int64_t i = 0; i < b; i++) {
        check(indices[i] >= 0 && indices[i] < set.n, "{}: image index {} out of range [0, {})", set.source, indices[i],
              set.n);
        image_to_chw(set.image(indices[i]), set.h, set.w, norm, p + i * 3 * set.h * set.w);
    }
    return out;
}

Tensor labels_tensor(const ImageSet& set, const std::vector<int64_t>& indices, bool coarse) {
    const std::vector<int32_t>& src = coarse ? set.coarse_labels : set.labels;
    check(!coarse || !src.empty(), "{}: has no coarse labels", set.source);
    Tensor out = Tensor::empty({(int64_t)indices.size()}, DType::I32);
    for (size_t i = 0; i < indices.size(); i++) {
        check(indices[i] >= 0 && indices[i] < set.n, "{}: image index {} out of range [0, {})", set.source, indices[i],
              set.n);
        out.data_i32()[i] = src[indices[i]];
    }
    return out;
}

}  // namespace data

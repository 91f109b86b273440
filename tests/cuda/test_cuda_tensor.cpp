// tests/cuda/test_cuda_tensor.cpp: device tensors: copies both ways, factories, views, the
// guard that keeps host code out of device memory, and the memory statistics.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include "engine/cuda/runtime.h"
#include "tests/cuda/parity.h"

using engine::DType;
using engine::Device;
using engine::Tensor;

TEST_CASE("cuda: the suite names the device it runs on", "[cuda]") {
    std::string d = engine::cuda::device_description();
    std::printf("[cuda] suite running on %s\n", d.c_str());
    REQUIRE(d.rfind("cuda: ", 0) == 0);
    REQUIRE(engine::cuda::available());
}

TEST_CASE("cuda: to() copies both ways, float and int", "[cuda]") {
    Tensor x = Tensor::from_vector(std::vector<float>{1.f, -2.f, 3.5f, 0.f, 7.f, 1e-20f, -0.f}, {7});
    Tensor d = x.to(Device::CUDA);
    REQUIRE(d.is_cuda());
    REQUIRE(!d.same_storage(x));
    REQUIRE(d.to(Device::CPU).to_vector() == x.to_vector());
    REQUIRE(d.to(Device::CUDA).same_storage(d));  // already there: the tensor itself

    Tensor ids = Tensor::from_vector(std::vector<int32_t>{3, -1, 2147483647}, {3});
    Tensor di = ids.to(Device::CUDA);
    REQUIRE(di.dtype() == DType::I32);
    REQUIRE(di.to(Device::CPU).to_vector() == ids.to_vector());
}

// copy_to_device stages its source in pinned buffers and does not wait (engine/cuda/runtime.cu):
// each copy lands, in order, though its source is gone when the call returns and the host has gone
// round the staging buffers several times (at growing sizes); a copy larger than a buffer goes in
// chunks. In the emulated build a buffer written again before its copy was known done is an error.
TEST_CASE("cuda: copies to the device may free their source at once", "[cuda]") {
    std::vector<Tensor> dst;
    std::vector<std::vector<float>> want;
    for (int i = 0; i < 40; i++) {
        int64_t n = 1 + (i * 7919) % 3001 + (i == 17 ? 200000 : 0);
        auto host = std::make_unique<std::vector<float>>(n);
        for (int64_t k = 0; k < n; k++) (*host)[k] = (float)(i * 100000 + k);
        dst.push_back(Tensor::empty({n}, DType::F32, Device::CUDA));
        engine::cuda::copy_to_device(dst.back().raw_f32(), host->data(), n * sizeof(float));
        want.push_back(*host);
        std::fill(host->begin(), host->end(), -1.f);  // the caller may reuse its memory...
        host.reset();                                  // ...or free it
    }
    // The same destination written three times: the last copy wins.
    Tensor same = Tensor::empty({4}, DType::F32, Device::CUDA);
    for (float v : {1.f, 2.f, 3.f}) {
        std::vector<float> h(4, v);
        engine::cuda::copy_to_device(same.raw_f32(), h.data(), h.size() * sizeof(float));
    }
    // Above a staging buffer's 16 MB: copied in chunks, each through a buffer of its own.
    const int64_t big = (int64_t(17) << 20) / 4 + 3;
    std::vector<float> host_big(big);
    for (int64_t k = 0; k < big; k++) host_big[k] = (float)(k % 1000003);
    Tensor dbig = Tensor::empty({big}, DType::F32, Device::CUDA);
    engine::cuda::copy_to_device(dbig.raw_f32(), host_big.data(), big * sizeof(float));
    std::fill(host_big.begin(), host_big.end(), -1.f);
    for (size_t i = 0; i < dst.size(); i++) REQUIRE(dst[i].to_vector() == want[i]);
    REQUIRE(same.to_vector() == std::vector<float>(4, 3.f));
    std::vector<float> back = dbig.to_vector();
    bool all = true;
    for (int64_t k = 0; k < big; k++) all = all && back[k] == (float)(k % 1000003);
    REQUIRE(all);
}

TEST_CASE("cuda: factories on the device", "[cuda]") {
    for (int64_t n : {1, 7, 33, 1025}) {
        Tensor z = Tensor::zeros({n}, DType::F32, Device::CUDA);
        Tensor f = Tensor::full({n}, 2.5f, DType::F32, Device::CUDA);
        Tensor i = Tensor::full({n}, 9.f, DType::I32, Device::CUDA);
        Tensor o = Tensor::ones({n, 1}, DType::F32, Device::CUDA);
        for (float v : z.to_vector()) REQUIRE(v == 0.f);
        for (float v : f.to_vector()) REQUIRE(v == 2.5f);
        for (float v : i.to_vector()) REQUIRE(v == 9.f);
        for (float v : o.to_vector()) REQUIRE(v == 1.f);
        REQUIRE(f.new_zeros({2}).is_cuda());
    }
    Tensor empty = Tensor::zeros({0, 4}, DType::F32, Device::CUDA);
    REQUIRE(empty.numel() == 0);
    REQUIRE(empty.to(Device::CPU).numel() == 0);
}

TEST_CASE("cuda: element access, clone, views, printing", "[cuda]") {
    Tensor d = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}).to(Device::CUDA);
    REQUIRE(d.at({1, 2}) == 6.f);
    d.set({0, 1}, -2.f);
    REQUIRE(d.at({0, 1}) == -2.f);
    Tensor c = d.clone();
    c.set({0, 0}, 100.f);
    REQUIRE(d.at({0, 0}) == 1.f);
    REQUIRE(d.reshape({3, 2}).at({2, 1}) == 6.f);
    REQUIRE(d.narrow(0, 1, 1).to_vector() == std::vector<float>{4, 5, 6});
    REQUIRE(Tensor::full({1}, 3.f, DType::F32, Device::CUDA).item() == 3.f);
    REQUIRE(d.str().find("device=cuda") != std::string::npos);
}

TEST_CASE("cuda: host code cannot touch device memory", "[cuda]") {
    Tensor d = Tensor::zeros({4}, DType::F32, Device::CUDA);
    REQUIRE_THROWS_WITH(d.data_f32(), Catch::Contains("lives in CUDA device memory") && Catch::Contains("[4]"));
    Tensor di = Tensor::zeros({4}, DType::I32, Device::CUDA);
    REQUIRE_THROWS_WITH(di.data_i32(), Catch::Contains("lives in CUDA device memory"));
}

TEST_CASE("cuda: gradients flow through to()", "[cuda]") {
    Tensor x = test::randn({5});
    Tensor y = x.to(Device::CUDA).to(Device::CPU);
    engine::sum(engine::mul(y, 3.f)).backward();
    REQUIRE(x.grad().defined());
    REQUIRE(!x.grad().is_cuda());
    for (float g : x.grad().to_vector()) REQUIRE(g == 3.f);
}

TEST_CASE("cuda: memory in use and its peak", "[cuda]") {
    size_t before = engine::cuda::memory_in_use();
    engine::cuda::reset_peak_memory();
    {
        Tensor a = Tensor::empty({1000}, DType::F32, Device::CUDA);
        REQUIRE(engine::cuda::memory_in_use() == before + 4000);
    }
    REQUIRE(engine::cuda::memory_in_use() == before);
    REQUIRE(engine::cuda::peak_memory() >= before + 4000);
}

// tests/test_autograd.cpp: the autograd machinery: accumulation, no-grad, detach, graph
// release, deep chains without recursion, and error messages.
#include <catch2/catch.hpp>

#include "engine/error.h"
#include "engine/ops.h"
#include "tests/helpers.h"

using namespace engine;

TEST_CASE("backward on a scalar, with a given gradient, and accumulation", "[autograd]") {
    Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}).requires_grad_();
    Tensor y = sum(mul(x, x));  // dy/dx = 2x
    y.backward();
    CHECK(x.grad().to_vector() == std::vector<float>{2, 4, 6});
    sum(mul(x, 3.f)).backward();  // accumulates: 2x + 3
    CHECK(x.grad().to_vector() == std::vector<float>{5, 7, 9});
    x.zero_grad();
    CHECK(!x.grad().defined());
    Tensor z = mul(x, 2.f);
    z.backward(Tensor::from_vector(std::vector<float>{1, 10, 100}, {3}));
    CHECK(x.grad().to_vector() == std::vector<float>{2, 20, 200});
    CHECK_THROWS_WITH(z.backward(), Catch::Contains("not a scalar"));
    CHECK_THROWS_WITH(mul(x, 2.f).backward(Tensor::ones({4})), Catch::Contains("does not match"));
}

TEST_CASE("a tensor used twice gets both contributions", "[autograd]") {
    Tensor x = Tensor::from_vector(std::vector<float>{2}, {1}).requires_grad_();
    Tensor a = mul(x, 3.f), b = exp(x);
    sum(add(mul(a, b), a)).backward();  // d/dx (3x e^x + 3x) = 3e^x + 3x e^x + 3
    float e = std::exp(2.f);
    CHECK(x.grad().item() == Approx(3 * e + 6 * e + 3).epsilon(1e-5));
}

TEST_CASE("no-grad scope and detach stop the graph", "[autograd]") {
    Tensor x = Tensor::ones({2}).requires_grad_();
    {
        NoGrad ng;
        Tensor y = mul(x, 2.f);
        CHECK(!y.requires_grad());
    }
    CHECK(grad_enabled());
    Tensor d = x.detach();
    CHECK(!d.requires_grad());
    CHECK(d.same_storage(x));
    Tensor y = add(mul(x, 2.f), mul(d, 5.f));
    sum(y).backward();
    CHECK(x.grad().to_vector() == std::vector<float>{2, 2});
}

TEST_CASE("the graph is released after backward", "[autograd]") {
    Tensor x = Tensor::ones({3}).requires_grad_();
    Tensor h = tanh(x);
    Tensor y = sum(h);
    std::weak_ptr<Node> node = h.impl()->grad_fn;
    CHECK(!node.expired());
    y.backward();
    CHECK(node.expired());
    CHECK(!h.grad().defined());  // intermediate grads are not kept
    CHECK(x.grad().defined());
}

TEST_CASE("a 10,000-op chain neither recurses nor overflows the stack", "[autograd]") {
    Tensor x = Tensor::full({4}, 0.5f).requires_grad_();
    Tensor y = x;
    for (int i = 0; i < 10000; i++) y = add(y, 0.001f);
    sum(y).backward();
    CHECK(x.grad().to_vector() == std::vector<float>{1, 1, 1, 1});
    // And a chain that is dropped without backward is freed without deep recursion either.
    Tensor z = x;
    for (int i = 0; i < 10000; i++) z = mul(z, 1.0f);
    z = Tensor();
}

TEST_CASE("only float tensors can require grad", "[autograd]") {
    Tensor i = Tensor::zeros({2}, DType::I32);
    CHECK_THROWS_WITH(i.requires_grad_(), Catch::Contains("float32"));
}

// Backward frees each intermediate gradient (and the node's saved tensors) once it has reached
// the node's inputs: over a chain of 16 ops on 1 MiB tensors, backward's own peak stays at a few
// gradients, not one per op as when the graph was released only at the end.
TEST_CASE("backward frees intermediate gradients as it goes", "[autograd]") {
    Tensor x = Tensor::uniform({1 << 18}).requires_grad_();  // 1 MiB
    Tensor y = x;
    for (int i = 0; i < 16; i++) y = mul(y, 1.01f);
    Tensor loss = sum(y);
    size_t before = host_memory_in_use();
    reset_host_peak_memory();
    loss.backward();
    size_t backward_peak = host_peak_memory() - before;
    CHECK(backward_peak < (size_t)5 << 20);
    CHECK(x.grad().defined());
}

// tests/test_autograd.cpp: the autograd machinery: accumulation, no-grad, detach, graph
// release, deep chains without recursion, and error messages.
#include <catch2/catch.hpp>

#include <cmath>
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

// An intermediate's gradient may share memory with another's (no copy); a leaf's never does, and
// adding into a shared gradient must not write into the other tensor's.
TEST_CASE("shared gradients: intermediates share without copies, leaves own theirs", "[autograd]") {
    SECTION("a residual add hands one gradient to both inputs; both leaves get their own") {
        Tensor a = Tensor::from_vector(std::vector<float>{1, 2}, {2}).requires_grad_();
        Tensor b = Tensor::from_vector(std::vector<float>{3, 4}, {2}).requires_grad_();
        add(a, b).backward(Tensor::from_vector(std::vector<float>{5, 6}, {2}));
        REQUIRE(a.grad().raw_f32() != b.grad().raw_f32());
        a.grad().data_f32()[0] = 100.f;  // an optimizer may write into one
        CHECK(b.grad().to_vector() == std::vector<float>{5, 6});
    }
    SECTION("adding into a shared gradient leaves the other tensor's alone") {
        // add(h1, h2) hands the same g to h1 and h2; mul(h1, h2) then adds g·h2 to h1 and g·h1 to
        // h2. Written in place into the shared memory, each would land in both. With h1 = 3x and
        // h2 = 5x: dL/dx = g·(3 + 5 + 30x). Both orders of the outer add's inputs: the backward
        // visits add and mul in either order.
        std::vector<float> g{1, 10}, xs{1, -2}, want;
        for (int i = 0; i < 2; i++) want.push_back(g[i] * (8.f + 30.f * xs[i]));
        for (bool swap : {false, true}) {
            INFO("swapped " << swap);
            Tensor x = Tensor::from_vector(xs, {2}).requires_grad_();
            Tensor h1 = mul(x, 3.f), h2 = mul(x, 5.f);
            Tensor sum_h = add(h1, h2), prod = mul(h1, h2);
            Tensor y = swap ? add(prod, sum_h) : add(sum_h, prod);
            y.backward(Tensor::from_vector(g, {2}));
            CHECK(x.grad().to_vector() == want);
        }
    }
    SECTION("a leaf and an intermediate given the same gradient") {
        Tensor x = Tensor::from_vector(std::vector<float>{2}, {1}).requires_grad_();
        Tensor h = mul(x, 5.f);
        Tensor y = add(x, h);  // backward gives the same g to the leaf x and to h
        Tensor z = mul(y, 1.f);
        z.backward(Tensor::from_vector(std::vector<float>{1}, {1}));
        CHECK(x.grad().item() == 6.f);  // 1 from x directly, 5 through h, summed into x's own memory
    }
}

// An activation that no backward reads is freed as soon as the code drops its last handle, though
// the graph still lists it as an input; one a closure captured is kept.
TEST_CASE("an intermediate only the graph holds gives its memory back before the backward", "[autograd]") {
    const int64_t n = 1 << 18;  // 1 MiB
    Tensor x = Tensor::uniform({n}).requires_grad_();
    size_t before = host_memory_in_use();
    Tensor loss;
    {
        Tensor a = mul(x, 1.5f);  // mul by a scalar: the backward needs no input
        Tensor b = mul(a, 2.f);
        loss = sum(b);
    }
    // a and b (2 MiB) are gone; what is left is the loss and the graph's bookkeeping.
    CHECK(host_memory_in_use() - before < (size_t)(n * 4) / 4);
    loss.backward();
    std::vector<float> g = x.grad().to_vector();
    CHECK(g[0] == 3.f);
    CHECK(g[n - 1] == 3.f);

    SECTION("a tensor a closure reads keeps its data") {
        Tensor y = Tensor::uniform({n}).requires_grad_();
        size_t start = host_memory_in_use();
        Tensor l2;
        {
            Tensor c = mul(y, 1.f);
            l2 = sum(mul(c, c));  // mul's backward reads both inputs: c stays
        }
        CHECK(host_memory_in_use() - start >= (size_t)(n * 4));
        l2.backward();
        std::vector<float> yv = y.to_vector(), gy = y.grad().to_vector();
        CHECK(gy[5] == Approx(2.f * yv[5]));
    }
}

// add and sub need only their inputs' shapes: a residual add does not keep the branch output it adds
// (nor the stream), with or without broadcasting.
TEST_CASE("add and sub keep no input alive for the backward", "[autograd]") {
    const int64_t n = 1 << 18;  // 1 MiB
    Tensor x = Tensor::uniform({4, n / 4}).requires_grad_(), row = Tensor::uniform({n / 4}).requires_grad_();
    size_t before = host_memory_in_use();
    Tensor loss;
    {
        Tensor a = mul(x, 2.f), b = mul(x, 3.f);
        Tensor s = sub(add(a, b), row);  // a, b and add's output are dropped here
        loss = sum(mul(s, 0.5f));
    }
    // What is left: the loss and the graph's bookkeeping (s, a scalar product's input, is gone too).
    CHECK(host_memory_in_use() - before < (size_t)(n * 4) / 4);
    loss.backward();
    CHECK(x.grad().to_vector()[7] == 2.5f);
    CHECK(row.grad().to_vector()[3] == -2.f);
}

// A unary op keeps x and y = f(x) only where its derivative reads them (engine/ops/pointwise.h):
// relu2 keeps its input, tanh its output, neg neither. The gradients are unchanged.
TEST_CASE("a unary op keeps only what its derivative reads", "[autograd]") {
    const int64_t n = 1 << 18;  // 1 MiB
    const size_t mib = (size_t)n * 4;
    Tensor x = Tensor::uniform({n}, -1.f, 1.f).requires_grad_();
    std::vector<float> xs = x.to_vector();
    struct Case {
        const char* name;
        Tensor (*f)(const Tensor&);
        size_t kept;  // MiB held from the forward to the backward
        float (*df)(float);
    };
    for (const Case& c : {Case{"relu2", relu2, 1, [](float v) { return v > 0.f ? 2.f * v : 0.f; }},
                          Case{"tanh", tanh, 1, [](float v) { return 1.f - std::tanh(v) * std::tanh(v); }},
                          Case{"neg", neg, 0, [](float) { return -1.f; }}}) {
        INFO(c.name);
        x.zero_grad();
        size_t before = host_memory_in_use();
        Tensor loss;
        {
            Tensor h = mul(x, 1.f);  // an intermediate: freed unless the op keeps it
            loss = sum(mul(c.f(h), 2.f));
        }
        size_t held = host_memory_in_use() - before;
        CHECK(held >= c.kept * mib);
        CHECK(held < c.kept * mib + mib / 4);
        loss.backward();
        std::vector<float> g = x.grad().to_vector();
        for (int64_t i : {int64_t(0), n / 3, n - 1}) CHECK(g[i] == Approx(2.f * c.df(xs[i])).margin(1e-6));
    }
}

// accumulated_grad (engine/autograd.h): a backward adds into the gradient its input has so far,
// when nothing else holds that gradient's memory, and returns it; autograd then adds nothing.
TEST_CASE("accumulated_grad: a closure adds into an input's gradient in place, never into a shared one",
          "[autograd]") {
    SECTION("the second of two consumers gets the first one's gradient to add into") {
        Tensor leaf = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}).requires_grad_();
        Tensor x = mul(leaf, 2.f);
        std::vector<bool> saw;
        auto consume = [&saw](const Tensor& in) {
            Tensor out = in.detach().clone();
            return attach(out, "consume", {in}, [&saw, in](const Tensor& g) {
                Tensor acc = accumulated_grad(in);
                saw.push_back(acc.defined());
                if (!acc.defined()) return std::vector<Tensor>{g.clone()};
                for (int64_t i = 0; i < g.numel(); i++) acc.data_f32()[i] += g.data_f32()[i];
                return std::vector<Tensor>{acc};
            });
        };
        mul(add(consume(x), consume(x)), 3.f).backward(Tensor::from_vector(std::vector<float>{1, 10, 100}, {3}));
        CHECK(saw == std::vector<bool>{false, true});
        CHECK(leaf.grad().to_vector() == std::vector<float>{12, 120, 1200});  // 2 · (3 + 3) · g
    }
    SECTION("linears of one input, with a residual add that shares its gradient, in both orders") {
        // h feeds two linears and a residual add: r = (h·Waᵀ + h) + h·Wbᵀ. Reference: each use of h
        // a leaf of its own, their gradients summed.
        Tensor x = test::param({4, 3}, 1), wa = test::param({3, 3}, 2), wb = test::param({3, 3}, 3);
        Tensor G = test::param({4, 3}, 4).detach();
        for (bool swap : {false, true}) {
            INFO("swapped " << swap);
            for (Tensor* t : {&x, &wa, &wb}) t->zero_grad();
            Tensor h = mul(x, 1.5f);
            Tensor inner = swap ? add(h, linear(h, wa)) : add(linear(h, wa), h);
            Tensor r = swap ? add(linear(h, wb), inner) : add(inner, linear(h, wb));
            sum(mul(r, G)).backward();
            std::vector<Tensor> got{x.grad(), wa.grad(), wb.grad()};

            Tensor h1 = mul(x, 1.5f).detach().requires_grad_(), h2 = h1.detach().requires_grad_(),
                   h3 = h1.detach().requires_grad_();
            Tensor wa2 = wa.detach().requires_grad_(), wb2 = wb.detach().requires_grad_();
            sum(mul(add(add(linear(h1, wa2), h2), linear(h3, wb2)), G)).backward();
            Tensor dh = add(add(h1.grad(), h2.grad()), h3.grad());
            CHECK(test::max_abs_diff(got[0], mul(dh, 1.5f)) < 1e-5f);
            CHECK(test::max_abs_diff(got[1], wa2.grad()) < 1e-5f);
            CHECK(test::max_abs_diff(got[2], wb2.grad()) < 1e-5f);
        }
    }
    SECTION("not for a leaf: a weight's kept .grad, zeroed in place, is added into by autograd") {
        Tensor x = test::param({5, 4}, 5), z = test::param({5, 4}, 6), w = test::param({2, 4}, 7);
        auto loss = [&] { return sum(add(linear(x, w), mul(linear(z, w), 2.f))); };
        loss().backward();
        std::vector<float> once = w.grad().to_vector();
        float* kept = w.grad().raw_f32();
        for (int64_t i = 0; i < w.numel(); i++) kept[i] = 0.f;  // as a captured step zeroes it
        bool leaf_offered = true;
        Tensor probe = attach(w.detach().clone(), "probe", {w}, [&leaf_offered, w](const Tensor&) {
            leaf_offered = accumulated_grad(w).defined();
            return std::vector<Tensor>{Tensor()};
        });
        sum(probe).backward();
        CHECK(!leaf_offered);  // w has a .grad, but it is a leaf's
        loss().backward();
        CHECK(w.grad().raw_f32() == kept);
        CHECK(w.grad().to_vector() == once);
    }
}

// SPDX-License-Identifier: Apache-2.0
// Session bookkeeping over a test double backend: page accounting,
// all-or-nothing appends, fork with copy-on-write, path switching and the
// validation messages. Attention numerics are not tested here.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/session.hpp"
#include "test_core_fake_backend.hpp"

namespace {

constexpr int kPage = 4;

gqla_config small_gqla(int64_t max_tokens, int layers = 2) {
    gqla_config c = gqla::default_config(GQLA_KIND_GQLA);
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.latent_dim = 8;
    c.nope_dim = 4;
    c.rope_dim = 2;
    c.value_dim = 3;
    c.num_layers = layers;
    c.cache_dtype = GQLA_DTYPE_F32;
    c.page_size = kPage;
    c.max_tokens = max_tokens;
    c.max_sequences = 8;
    c.path = GQLA_PATH_ABSORB;
    c.num_threads = 1;
    return c;
}

// GQA kind: 4 heads over 2 KV heads of 8, 16 pages.
gqla_config small_gqa(gqla_dtype cache) {
    gqla_config c = gqla::default_config(GQLA_KIND_GQA);
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 8;
    c.page_size = kPage;
    c.max_tokens = 64;
    c.cache_dtype = cache;
    return c;
}

// A dense row-major host tensor over `data`.
gqla_tensor host_tensor(void* data, gqla_dtype dtype, std::vector<int64_t> shape) {
    gqla_tensor t{};
    t.struct_size = sizeof(t);
    t.data = data;
    t.dtype = dtype;
    t.device = GQLA_DEVICE_CPU;
    t.ndim = static_cast<int32_t>(shape.size());
    int64_t stride = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
        t.shape[i] = shape[static_cast<size_t>(i)];
        t.strides[i] = stride;
        stride *= shape[static_cast<size_t>(i)];
    }
    return t;
}
gqla_tensor host_tensor(std::vector<float>& data, std::vector<int64_t> shape) {
    return host_tensor(data.data(), GQLA_DTYPE_F32, std::move(shape));
}

// Latent rows whose first element is first, first+1, ... (the fake keeps it).
struct Rows {
    std::vector<float> c, kr;
    gqla_tensor tc{}, tkr{};
    Rows(int64_t n, float first, int r = 8, int d_r = 2) {
        c.assign(static_cast<size_t>(n * r), 0.5f);
        kr.assign(static_cast<size_t>(n * d_r), 0.25f);
        for (int64_t i = 0; i < n; ++i) c[static_cast<size_t>(i * r)] = first + static_cast<float>(i);
        tc = host_tensor(c, {n, r});
        tkr = host_tensor(kr, {n, d_r});
    }
};

gqla_tensor weights_tensor(std::vector<float>& w) {
    w.assign(2 * (4 + 3) * 8, 0.1f);
    return host_tensor(w, {2 * (4 + 3), 8});
}

// Token t of `seq` in `layer` as the fake backend stored it.
float token(const gqla::Session& s, gqla_seq_id seq, int32_t layer, int64_t t) {
    std::vector<int32_t> table = s.page_table(seq);
    return fake::last_created()->row(layer, table[static_cast<size_t>(t / kPage)], t % kPage);
}

gqla_status status_of(const std::function<void()>& f, std::string* message = nullptr) {
    try {
        f();
    } catch (const gqla::Error& e) {
        if (message) *message = e.what();
        return e.status();
    }
    return GQLA_OK;
}

struct Fixture {
    std::vector<float> w;
    gqla::Session s;
    explicit Fixture(const gqla_config& c) : s(c, fake::vtable()) {
        gqla_tensor wt = weights_tensor(w);
        for (int32_t l = 0; l < c.num_layers; ++l) s.set_weights(l, &wt);
    }
};

}  // namespace

TEST_CASE("session: appends take whole pages and stats count them") {
    Fixture f(small_gqla(64));
    gqla::Session& s = f.s;
    gqla_seq_id a = s.add_sequence();
    Rows r(5, 100);
    s.append(0, a, &r.tc, &r.tkr);
    CHECK(s.sequence_length(a, 0) == 5);
    CHECK(s.sequence_length(a, 1) == 0);
    gqla_stats st = s.stats();
    CHECK(st.pages_total == 16);
    CHECK(st.pages_used == 2);
    CHECK(st.tokens_cached == 5);
    CHECK(st.token_capacity_left == 14 * kPage);
    for (int t = 0; t < 5; ++t) CHECK(token(s, a, 0, t) == 100 + t);
    // Layer 1 reuses the pages layer 0 already grew.
    Rows r1(6, 200);
    s.append(1, a, &r1.tc, &r1.tkr);
    CHECK(s.stats().pages_used == 2);
    CHECK(s.stats().tokens_cached == 6);
    s.release_sequence(a);
    CHECK(s.stats().pages_used == 0);
    CHECK(s.stats().tokens_cached == 0);
}

TEST_CASE("session: a capacity failure appends nothing") {
    Fixture f(small_gqla(3 * kPage));
    gqla::Session& s = f.s;
    gqla_seq_id a = s.add_sequence(), b = s.add_sequence();
    Rows r(2 * kPage, 0);
    s.append(0, a, &r.tc, &r.tkr);
    const int appends_before = fake::last_created()->append_calls;

    // a needs 1 more page, b needs 2: 3 > 1 free.
    Rows both(1 + 2 * kPage, 50);
    gqla_seq_id ids[2] = {a, b};
    int64_t counts[2] = {1, 2 * kPage};
    std::string msg;
    CHECK(status_of([&] { s.append_batch(0, 2, ids, counts, &both.tc, &both.tkr); }, &msg) == GQLA_ERR_CAPACITY);
    CHECK(msg.find("needs 3 free pages, only 1 of 3") != std::string::npos);
    CHECK(fake::last_created()->append_calls == appends_before);
    CHECK(s.sequence_length(a, 0) == 2 * kPage);
    CHECK(s.sequence_length(b, 0) == 0);
    CHECK(s.stats().pages_used == 2);
    CHECK(s.page_table(b).empty());
}

TEST_CASE("session: a backend failure rolls back pages and lengths") {
    Fixture f(small_gqla(8 * kPage));
    gqla::Session& s = f.s;
    gqla_seq_id a = s.add_sequence();
    Rows r(3, 0);
    s.append(0, a, &r.tc, &r.tkr);
    std::vector<int32_t> table = s.page_table(a);

    for (fake::Op op : {fake::Op::Append, fake::Op::UpdateSequence}) {
        fake::last_created()->fail_next = op;
        Rows more(6, 10);
        std::string msg;
        CHECK(status_of([&] { s.append(0, a, &more.tc, &more.tkr); }, &msg) == GQLA_ERR_BACKEND);
        CHECK(msg.find("injected failure") != std::string::npos);
        CHECK(s.sequence_length(a, 0) == 3);
        CHECK(s.page_table(a) == table);
        CHECK(s.stats().pages_used == 1);
    }
    // And the session still works afterwards.
    Rows more(6, 10);
    s.append(0, a, &more.tc, &more.tkr);
    CHECK(s.sequence_length(a, 0) == 9);
    CHECK(s.stats().pages_used == 3);
}

TEST_CASE("session: fork shares pages and copies the partial page on write") {
    Fixture f(small_gqla(16 * kPage));
    gqla::Session& s = f.s;
    gqla_seq_id parent = s.add_sequence();
    Rows r(kPage + 2, 0);  // page 0 full, page 1 holds 2 tokens
    s.append(0, parent, &r.tc, &r.tkr);
    gqla_seq_id child = s.fork_sequence(parent);
    CHECK(child != parent);
    std::vector<int32_t> pt = s.page_table(parent);
    CHECK(s.page_table(child) == pt);
    CHECK(s.page_refcount(pt[0]) == 2);
    CHECK(s.page_refcount(pt[1]) == 2);
    CHECK(s.stats().pages_used == 2);
    CHECK(s.sequence_length(child, 0) == kPage + 2);

    Rows c1(1, 500);
    s.append(0, child, &c1.tc, &c1.tkr);
    std::vector<int32_t> ct = s.page_table(child);
    CHECK(ct[0] == pt[0]);  // full page stays shared
    CHECK(ct[1] != pt[1]);  // partial page was copied
    CHECK(s.page_refcount(pt[0]) == 2);
    CHECK(s.page_refcount(pt[1]) == 1);
    CHECK(s.page_refcount(ct[1]) == 1);
    CHECK(fake::last_created()->copied_pages == 1);
    CHECK(s.stats().pages_used == 3);
    for (int t = 0; t < kPage + 2; ++t) {
        CHECK(token(s, child, 0, t) == t);
        CHECK(token(s, parent, 0, t) == t);
    }
    CHECK(token(s, child, 0, kPage + 2) == 500);

    // The parent now owns its partial page alone: no copy.
    Rows p1(1, 900);
    s.append(0, parent, &p1.tc, &p1.tkr);
    CHECK(s.page_table(parent) == pt);
    CHECK(fake::last_created()->copied_pages == 1);
    CHECK(token(s, parent, 0, kPage + 2) == 900);
    CHECK(token(s, child, 0, kPage + 2) == 500);

    s.release_sequence(parent);
    CHECK(s.page_refcount(pt[0]) == 1);
    CHECK(s.stats().pages_used == 2);
    s.release_sequence(child);
    CHECK(s.stats().pages_used == 0);
}

TEST_CASE("session: copy-on-write covers pages another layer grew") {
    Fixture f(small_gqla(16 * kPage));
    gqla::Session& s = f.s;
    gqla_seq_id parent = s.add_sequence();
    Rows l0(kPage + 1, 0), l1(kPage, 100);
    s.append(0, parent, &l0.tc, &l0.tkr);
    s.append(1, parent, &l1.tc, &l1.tkr);
    gqla_seq_id child = s.fork_sequence(parent);
    // Layer 1 of the child writes slot 0 of page 1, which the parent shares.
    Rows c(1, 700);
    s.append(1, child, &c.tc, &c.tkr);
    CHECK(s.page_table(child)[1] != s.page_table(parent)[1]);
    CHECK(token(s, child, 0, kPage) == kPage);  // layer 0 data came along with the copy
    CHECK(token(s, child, 1, kPage) == 700);
    Rows p(1, 800);
    s.append(1, parent, &p.tc, &p.tkr);
    CHECK(token(s, parent, 1, kPage) == 800);
    CHECK(token(s, child, 1, kPage) == 700);
}

TEST_CASE("session: copy-on-write copies count against capacity") {
    Fixture f(small_gqla(2 * kPage));
    gqla::Session& s = f.s;
    gqla_seq_id parent = s.add_sequence();
    Rows r(kPage + 1, 0);
    s.append(0, parent, &r.tc, &r.tkr);
    gqla_seq_id child = s.fork_sequence(parent);
    Rows c(1, 9);
    std::string msg;
    CHECK(status_of([&] { s.append(0, child, &c.tc, &c.tkr); }, &msg) == GQLA_ERR_CAPACITY);
    CHECK(msg.find("1 copy-on-write") != std::string::npos);
    CHECK(s.page_refcount(s.page_table(parent)[1]) == 2);
    CHECK(s.sequence_length(child, 0) == kPage + 1);
}

TEST_CASE("session: sequence ids are never reused, slots are") {
    gqla_config c = small_gqla(64);
    c.max_sequences = 2;
    Fixture f(c);
    gqla::Session& s = f.s;
    gqla_seq_id a = s.add_sequence(), b = s.add_sequence();
    std::string msg;
    CHECK(status_of([&] { s.add_sequence(); }, &msg) == GQLA_ERR_CAPACITY);
    CHECK(status_of([&] { s.fork_sequence(a); }) == GQLA_ERR_CAPACITY);
    s.release_sequence(a);
    gqla_seq_id d = s.add_sequence();
    CHECK(d != a);
    CHECK(d != b);
    CHECK(status_of([&] { s.release_sequence(a); }, &msg) == GQLA_ERR_NOT_FOUND);
    CHECK(msg == "seq: unknown sequence id " + std::to_string(a));
}

TEST_CASE("session: argument validation messages") {
    Fixture f(small_gqla(64));
    gqla::Session& s = f.s;
    gqla_seq_id a = s.add_sequence(), b = s.add_sequence();
    Rows r(3, 0);
    std::string msg;

    CHECK(status_of([&] { s.append(2, a, &r.tc, &r.tkr); }, &msg) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(msg == "layer: 2 out of range [0, 2)");
    CHECK(status_of([&] { s.append(0, 99, &r.tc, &r.tkr); }, &msg) == GQLA_ERR_NOT_FOUND);
    CHECK(msg == "seq: unknown sequence id 99");
    CHECK(status_of([&] { s.append(0, a, &r.tkr, &r.tkr); }, &msg) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(msg == "c: shape[1] (latent_dim) expected 8, got 2");

    gqla_seq_id ids[3] = {a, 99, b};
    int64_t counts[3] = {1, 1, 1};
    CHECK(status_of([&] { s.append_batch(0, 3, ids, counts, &r.tc, &r.tkr); }, &msg) == GQLA_ERR_NOT_FOUND);
    CHECK(msg == "seqs[1]: unknown sequence id 99");
    gqla_seq_id dup[3] = {a, b, a};
    CHECK(status_of([&] { s.append_batch(0, 3, dup, counts, &r.tc, &r.tkr); }, &msg) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(msg.find("seqs[2]: sequence id") == 0);
    int64_t bad_counts[3] = {1, -1, 3};
    CHECK(status_of([&] { s.append_batch(0, 3, ids, bad_counts, &r.tc, &r.tkr); }, &msg) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(msg == "counts[1]: expected >= 0, got -1");
    int64_t wrong_total[2] = {1, 1};
    CHECK(status_of([&] { s.append_batch(0, 2, ids, wrong_total, &r.tc, &r.tkr); }, &msg) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(msg == "c: shape[0] (n) expected 2, got 3");

    // Counts of 0 are fine and leave the sequence alone.
    gqla_seq_id ab[2] = {a, b};
    int64_t zero_and_three[2] = {0, 3};
    s.append_batch(0, 2, ab, zero_and_three, &r.tc, &r.tkr);
    CHECK(s.sequence_length(a, 0) == 0);
    CHECK(s.sequence_length(b, 0) == 3);

    // Decode checks.
    std::vector<float> q(1 * 4 * 4 * 6, 0.f), o(1 * 4 * 4 * 3, 0.f);
    gqla_tensor tq = host_tensor(q, {1, 4, 4, 6}), to = host_tensor(o, {1, 4, 4, 3});
    CHECK(status_of([&] { s.decode(0, 1, &b, &tq, &to, nullptr); }, &msg) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(msg.find("seqs[0]: s_q 4 exceeds the 3 cached tokens") == 0);
    gqla_tensor t3 = host_tensor(q, {4, 4, 6});
    CHECK(status_of([&] { s.decode(0, 1, &b, &t3, &to, nullptr); }, &msg) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(msg == "q: expected 4 dims [batch, s_q, num_heads, nope_dim + rope_dim], got 3");
    gqla_tensor cuda_q = tq;
    cuda_q.device = GQLA_DEVICE_CUDA;
    CHECK(status_of([&] { s.decode(0, 1, &b, &cuda_q, &to, nullptr); }, &msg) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(msg == "q: device CUDA tensor given to a CPU session");
    gqla_tensor strided_q = tq;
    strided_q.strides[3] = 2;
    CHECK(status_of([&] { s.decode(0, 1, &b, &strided_q, &to, nullptr); }, &msg) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(msg.find("q: strides[3] (innermost) expected 1") == 0);

    std::vector<float> q2(1 * 2 * 4 * 6, 0.f), o2(1 * 2 * 4 * 3, 0.f);
    gqla_tensor tq2 = host_tensor(q2, {1, 2, 4, 6}), to2 = host_tensor(o2, {1, 2, 4, 3});
    s.decode(0, 1, &b, &tq2, &to2, nullptr);
    CHECK(fake::last_created()->last_q_len == 2);
    CHECK(fake::last_created()->last_lengths == std::vector<int64_t>{3});
    CHECK(fake::last_created()->last_path == GQLA_PATH_ABSORB);
}

TEST_CASE(
    "session: without FP8_EXPANDED an 8-bit GQLA session keeps to absorb, and GQA is refused before the backend") {
    gqla_config c = small_gqla(64);
    c.cache_dtype = GQLA_DTYPE_FP8_E4M3;
    c.num_kv_heads = 1;
    c.latent_dim = 64;        // a wide latent: the policy's first pick is the GQA path
    c.path = GQLA_PATH_AUTO;  // AUTO starts on the absorb path whatever its policy prefers
    gqla::Session s(c, fake::vtable_fp8_without_expanded());
    fake::Backend* be = fake::last_created();
    CHECK(s.active_path() == GQLA_PATH_ABSORB);
    CHECK_FALSE(be->expanded);
    std::string msg;
    CHECK(status_of([&] { s.select_path(GQLA_PATH_GQA); }, &msg) == GQLA_ERR_UNSUPPORTED);
    CHECK(msg.find("fp8_e4m3") != std::string::npos);
    CHECK_FALSE(be->expanded);  // set_expanded was never called
    CHECK(s.active_path() == GQLA_PATH_ABSORB);
    c.path = GQLA_PATH_GQA;
    CHECK(status_of([&] { gqla::Session refused(c, fake::vtable_fp8_without_expanded()); }, &msg) ==
          GQLA_ERR_UNSUPPORTED);
    CHECK(msg.find("GQLA_PATH_GQA") != std::string::npos);
}

TEST_CASE("session: weights are required and switching to the GQA path is all-or-nothing") {
    gqla_config c = small_gqla(64);
    gqla::Session s(c, fake::vtable());
    fake::Backend* be = fake::last_created();
    gqla_seq_id a = s.add_sequence();
    Rows r(3, 0);
    std::string msg;
    CHECK(status_of([&] { s.append(0, a, &r.tc, &r.tkr); }, &msg) == GQLA_ERR_INVALID_STATE);
    CHECK(msg.find("weights of layer 0 are not set") != std::string::npos);

    std::vector<float> w;
    gqla_tensor wt = weights_tensor(w);
    s.set_weights(0, &wt);
    s.append(0, a, &r.tc, &r.tkr);
    CHECK(s.active_path() == GQLA_PATH_ABSORB);

    // Layer 0 holds tokens and has weights; layer 1 is empty: GQA path OK.
    be->fail_next = fake::Op::Expand;
    CHECK(status_of([&] { s.select_path(GQLA_PATH_GQA); }) == GQLA_ERR_BACKEND);
    CHECK(s.active_path() == GQLA_PATH_ABSORB);
    CHECK(!be->expanded);
    s.select_path(GQLA_PATH_GQA);
    CHECK(s.active_path() == GQLA_PATH_GQA);
    CHECK(be->expanded);

    // Back to absorb frees the expanded cache.
    s.select_path(GQLA_PATH_ABSORB);
    CHECK(!be->expanded);
    CHECK(s.active_path() == GQLA_PATH_ABSORB);

    // A layer with tokens but no weights blocks the GQA path.
    gqla_config c2 = small_gqla(64);
    gqla::Session s2(c2, fake::vtable());
    s2.set_weights(1, &wt);
    gqla_seq_id x = s2.add_sequence();
    s2.append(1, x, &r.tc, &r.tkr);
    s2.set_weights(0, &wt);
    s2.select_path(GQLA_PATH_GQA);  // both layers have weights now
    CHECK(s2.active_path() == GQLA_PATH_GQA);

    gqla_path active, requested;
    s2.paths(&active, &requested);
    CHECK(active == GQLA_PATH_GQA);
    CHECK(requested == GQLA_PATH_GQA);
    CHECK(status_of([&] { s2.select_path(static_cast<gqla_path>(7)); }) == GQLA_ERR_INVALID_ARGUMENT);
}

TEST_CASE("session: GQA kind rejects weights and the absorb path") {
    const gqla_config c = small_gqa(GQLA_DTYPE_F32);
    gqla::Session s(c, fake::vtable());
    std::vector<float> w(64);
    gqla_tensor wt = host_tensor(w, {8, 8});
    std::string msg;
    CHECK(status_of([&] { s.set_weights(0, &wt); }, &msg) == GQLA_ERR_INVALID_STATE);
    CHECK(msg.find("GQA session") != std::string::npos);
    CHECK(status_of([&] { s.select_path(GQLA_PATH_ABSORB); }) == GQLA_ERR_INVALID_ARGUMENT);
    s.select_path(GQLA_PATH_AUTO);
    CHECK(s.active_path() == GQLA_PATH_GQA);

    gqla_seq_id a = s.add_sequence();
    std::vector<float> k(3 * 2 * 8, 1.f), v(3 * 2 * 8, 2.f);
    gqla_tensor tk = host_tensor(k, {3, 2, 8}), tv = host_tensor(v, {3, 2, 8});
    s.append(0, a, &tk, &tv);
    CHECK(s.sequence_length(a, 0) == 3);
    gqla_tensor wrong_v = host_tensor(v, {3, 2, 4});
    CHECK(status_of([&] { s.append(0, a, &tk, &wrong_v); }, &msg) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(msg == "v: shape[2] (value_dim) expected 8, got 4");
    gqla_config got = s.config();
    CHECK(got.value_dim == 8);
    CHECK(got.path == GQLA_PATH_GQA);
}

TEST_CASE("session: a failing backend create is reported") {
    fake::fail_next_create();
    std::string msg;
    CHECK(status_of([&] { gqla::Session s(small_gqla(64), fake::vtable()); }, &msg) == GQLA_ERR_OUT_OF_MEMORY);
    CHECK(msg == "fake backend: create failed: injected create failure");
}

TEST_CASE("session: a backend without the sparse features refuses indices before the backend runs") {
    // The CPU and CUDA backends have both features; a backend module built
    // before them (here the fake, its feature bits cleared or set) must be
    // refused by the core, naming the argument, with nothing changed.
    std::vector<float> k(3 * 2 * 8, 1.f), v(3 * 2 * 8, 2.f), q(4 * 8, 0.5f), o(4 * 8, 0.f);
    gqla_tensor tk = host_tensor(k, {3, 2, 8}), tv = host_tensor(v, {3, 2, 8});
    gqla_tensor tq = host_tensor(q, {1, 1, 4, 8}), to = host_tensor(o, {1, 1, 4, 8});
    std::vector<int32_t> idx = {0, 2};
    gqla_tensor ti = host_tensor(idx.data(), GQLA_DTYPE_I32, {1, 2});
    struct Case {
        gqla_dtype cache;
        uint32_t features;
        const char* names;
    };
    const Case cases[] = {
        {GQLA_DTYPE_F32, 0u, "indices (sparse attention)"},
        {GQLA_DTYPE_FP8_E4M3, GQLA_BACKEND_FEATURE_FP8_CACHE | GQLA_BACKEND_FEATURE_SPARSE, "fp8_e4m3"},
    };
    for (const Case& cs : cases) {
        CAPTURE(cs.names);
        gqla_backend_vtable vt = *fake::vtable();
        vt.features = cs.features;
        gqla::Session s(small_gqa(cs.cache), &vt);
        gqla_seq_id a = s.add_sequence();
        s.append(0, a, &tk, &tv);
        gqla::Session::AttentionCall call;
        call.batch = 1;
        call.ids = &a;
        call.q = &tq;
        call.o = &to;
        call.indices = &ti;
        const int decodes = fake::last_created()->decode_calls;
        std::string msg;
        CHECK(status_of([&] { s.attention(call); }, &msg) == GQLA_ERR_UNSUPPORTED);
        CHECK(msg.find("indices") != std::string::npos);
        CHECK(msg.find(cs.names) != std::string::npos);
        CHECK(fake::last_created()->decode_calls == decodes);
        // The same call without indices runs.
        call.indices = nullptr;
        s.attention(call);
        CHECK(fake::last_created()->decode_calls == decodes + 1);
    }
}

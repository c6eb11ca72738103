// SPDX-License-Identifier: Apache-2.0
#include "shard_fixture.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "tests/reference/reference.hpp"
#include "harness.hpp"

namespace shards {

void ok(gqla_status st) {
    INFO(std::string(gqla_last_error_message()));
    REQUIRE(st == GQLA_OK);
}

bool message_has(const char* needle) {
    const std::string msg = gqla_last_error_message();
    INFO(msg);
    return msg.find(needle) != std::string::npos;
}

gqla_stats stats_of(gqla_session* s) {
    gqla_stats st;
    std::memset(&st, 0, sizeof(st));
    st.struct_size = sizeof(st);
    ok(gqla_session_stats(s, &st));
    return st;
}

namespace {

std::vector<float> normal(std::mt19937_64& rng, size_t n) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

// A host f32 tensor over `data` with the given shape and strides (elements).
gqla_tensor strided(const float* data, std::vector<int64_t> shape, std::vector<int64_t> strides) {
    gqla_tensor t;
    ok(gqla_tensor_init(&t, const_cast<float*>(data), GQLA_DTYPE_F32, static_cast<int32_t>(shape.size()),
                        shape.data()));
    for (size_t i = 0; i < strides.size(); ++i) t.strides[i] = strides[i];
    return t;
}

gqla_device_type g_device = GQLA_DEVICE_CPU;

}  // namespace

gqla_device_type test_device() { return g_device; }
void use_device(gqla_device_type device) { g_device = device; }

std::vector<Shard> even_shards(int32_t groups, int32_t n) {
    std::vector<Shard> out;
    for (int32_t i = 0; i < n; ++i) out.push_back(Shard{i * (groups / n), groups / n});
    return out;
}

gqla_config gqla_layer(gqla_dtype cache, int32_t layers) {
    gqla_config c;
    ok(gqla_config_default(&c, GQLA_KIND_GQLA));
    c.num_heads = 8;
    c.num_kv_heads = 4;
    c.latent_dim = 40;
    c.nope_dim = 16;
    c.rope_dim = 8;
    c.value_dim = 12;
    c.num_layers = layers;
    c.cache_dtype = cache;
    c.device = test_device();
    c.num_threads = 2;
    c.page_size = 4;
    c.max_tokens = 1024;
    c.max_q_len = 8;
    return c;
}

gqla_config gqa_layer(gqla_dtype cache) {
    gqla_config c;
    ok(gqla_config_default(&c, GQLA_KIND_GQA));
    c.num_heads = 8;
    c.num_kv_heads = 4;
    c.head_dim = 24;
    c.value_dim = 16;
    c.cache_dtype = cache;
    c.device = test_device();
    c.num_threads = 2;
    c.page_size = 4;
    c.max_tokens = 1024;
    c.max_q_len = 8;
    return c;
}

Fixture::Fixture(const gqla_config& full, Options opt)
    : cfg_(full), opt_(std::move(opt)), seed_(opt_.seed ? opt_.seed : abi::test_seed()), rng_(seed_) {
    ok(gqla_session_create(&cfg_, &full_));
    ok(gqla_session_get_config(full_, &cfg_));  // resolved dims
    for (const Shard& sh : opt_.shards) {
        gqla_config c = full;
        c.group_begin = sh.begin;
        c.group_count = sh.count;
        if (c.kind == GQLA_KIND_GQLA) c.keep_latent = opt_.keep_latent;
        gqla_session* s = nullptr;
        ok(gqla_session_create(&c, &s));
        ranks_.push_back(s);
    }
    if (cfg_.kind != GQLA_KIND_GQLA) return;
    const size_t rows = static_cast<size_t>(cfg_.num_kv_heads) * (cfg_.nope_dim + cfg_.value_dim);
    for (int32_t l = 0; l < cfg_.num_layers; ++l) {
        w_.push_back(normal(rng_, rows * static_cast<size_t>(cfg_.latent_dim)));
        set_weights(full_, l, nullptr);
        for (size_t i = 0; i < ranks_.size(); ++i) set_weights(ranks_[i], l, &opt_.shards[i]);
    }
}

Fixture::~Fixture() {
    gqla_session_destroy(full_);
    for (gqla_session* s : ranks_) gqla_session_destroy(s);
}

void Fixture::set_weights(gqla_session* s, int32_t layer, const Shard* shard) {
    const int64_t per_group = cfg_.nope_dim + cfg_.value_dim, r = cfg_.latent_dim;
    const float* w = w_[static_cast<size_t>(layer)].data();
    gqla_tensor t = strided(w, {cfg_.num_kv_heads * per_group, r}, {r, 1});
    if (shard != nullptr && opt_.shard_rows_weights)
        t = strided(w + shard->begin * per_group * r, {shard->count * per_group, r}, {r, 1});
    ok(gqla_set_weights(s, layer, &t));
}

int32_t Fixture::q_dim() const { return cfg_.kind == GQLA_KIND_GQLA ? cfg_.nope_dim + cfg_.rope_dim : cfg_.head_dim; }
int32_t Fixture::v_dim() const { return cfg_.value_dim; }

int Fixture::add() {
    Mirror m;
    m.layers.resize(static_cast<size_t>(cfg_.num_layers));
    gqla_seq_id id = 0;
    ok(gqla_sequence_add(full_, &id));
    m.ids.push_back(id);
    for (gqla_session* s : ranks_) {
        ok(gqla_sequence_add(s, &id));
        m.ids.push_back(id);
    }
    seqs_.push_back(std::move(m));
    return static_cast<int>(seqs_.size()) - 1;
}

int Fixture::fork(int seq) {
    Mirror m;
    m.layers = seqs_[static_cast<size_t>(seq)].layers;
    const std::vector<gqla_seq_id> parents = seqs_[static_cast<size_t>(seq)].ids;
    std::vector<gqla_session*> all{full_};
    all.insert(all.end(), ranks_.begin(), ranks_.end());
    for (size_t i = 0; i < all.size(); ++i) {
        gqla_seq_id child = 0;
        ok(gqla_sequence_fork(all[i], parents[i], &child));
        m.ids.push_back(child);
    }
    seqs_.push_back(std::move(m));
    return static_cast<int>(seqs_.size()) - 1;
}

void Fixture::append(int seq, int32_t layer, int64_t n) {
    const bool gqla = cfg_.kind == GQLA_KIND_GQLA;
    const int64_t G = cfg_.num_kv_heads;
    const int64_t a_cols = gqla ? cfg_.latent_dim : G * cfg_.head_dim;
    const int64_t b_cols = gqla ? cfg_.rope_dim : G * cfg_.value_dim;
    std::vector<float> a = normal(rng_, static_cast<size_t>(n * a_cols));
    std::vector<float> b = normal(rng_, static_cast<size_t>(n * b_cols));
    Mirror& m = seqs_[static_cast<size_t>(seq)];
    auto tensors = [&](const Shard* sh) {
        if (gqla)
            return std::make_pair(strided(a.data(), {n, a_cols}, {a_cols, 1}),
                                  strided(b.data(), {n, b_cols}, {b_cols, 1}));
        const int64_t D = cfg_.head_dim, Dv = cfg_.value_dim;
        const int64_t g0 = sh ? sh->begin : 0, gc = sh ? sh->count : G;
        return std::make_pair(strided(a.data() + g0 * D, {n, gc, D}, {G * D, D, 1}),
                              strided(b.data() + g0 * Dv, {n, gc, Dv}, {G * Dv, Dv, 1}));
    };
    auto t = tensors(nullptr);
    ok(gqla_append(full_, layer, m.ids[0], &t.first, &t.second));
    for (size_t i = 0; i < ranks_.size(); ++i) {
        t = tensors(&opt_.shards[i]);
        ok(gqla_append(ranks_[i], layer, m.ids[i + 1], &t.first, &t.second));
    }
    Rows& rows = m.layers[static_cast<size_t>(layer)];
    rows.a.insert(rows.a.end(), a.begin(), a.end());
    rows.b.insert(rows.b.end(), b.begin(), b.end());
}

std::vector<gqla_seq_id> Fixture::ids_of(const std::vector<int>& seqs, size_t session) const {
    std::vector<gqla_seq_id> ids;
    for (int s : seqs) ids.push_back(seqs_[static_cast<size_t>(s)].ids[session]);
    return ids;
}

std::vector<float> Fixture::queries(const std::vector<int32_t>& q_lens) {
    int64_t n = 0;
    for (int32_t k : q_lens) n += k;
    return normal(rng_, static_cast<size_t>(n * cfg_.num_heads * q_dim()));
}

gqla_status Fixture::run(gqla_session* s, int32_t layer, const std::vector<gqla_seq_id>& ids, int32_t s_q,
                         const std::vector<int32_t>& q_lens, const float* q, float* o, float* lse, int32_t head0,
                         int32_t heads, gqla_path path, gqla_path* taken) const {
    const int64_t H = cfg_.num_heads, Dq = q_dim(), Dv = v_dim(), B = static_cast<int64_t>(ids.size());
    q += head0 * Dq;
    o += head0 * Dv;
    lse += head0;
    if (q_lens.empty()) {
        gqla_tensor qt = strided(q, {B, s_q, heads, Dq}, {s_q * H * Dq, H * Dq, Dq, 1});
        gqla_tensor ot = strided(o, {B, s_q, heads, Dv}, {s_q * H * Dv, H * Dv, Dv, 1});
        gqla_tensor lt = strided(lse, {B, s_q, heads}, {s_q * H, H, 1});
        gqla_path active = GQLA_PATH_AUTO;
        gqla_status st = gqla_decode(s, layer, static_cast<int32_t>(B), ids.data(), &qt, &ot, &lt);
        gqla_get_path(s, &active, nullptr);
        *taken = active;
        return st;
    }
    int64_t N = 0;
    for (int32_t k : q_lens) N += k;
    gqla_tensor qt = strided(q, {N, heads, Dq}, {H * Dq, Dq, 1});
    gqla_tensor ot = strided(o, {N, heads, Dv}, {H * Dv, Dv, 1});
    gqla_tensor lt = strided(lse, {N, heads}, {H, 1});
    gqla_attention_args args;
    ok(gqla_attention_args_default(&args));
    args.layer = layer;
    args.batch = static_cast<int32_t>(B);
    args.seqs = ids.data();
    args.q_lens = q_lens.data();
    args.q = &qt;
    args.o = &ot;
    args.lse = &lt;
    args.path = path;
    args.path_taken = taken;
    return gqla_attention(s, &args);
}

gqla_status Fixture::run_full(int32_t layer, const std::vector<int>& seqs, int32_t s_q,
                              const std::vector<int32_t>& q_lens, const std::vector<float>& q, gqla_path path,
                              Output& out) const {
    const size_t rows = q.size() / static_cast<size_t>(q_dim());
    out.o.assign(rows * static_cast<size_t>(v_dim()), NAN);
    out.lse.assign(rows, NAN);
    return run(full_, layer, ids_of(seqs, 0), s_q, q_lens, q.data(), out.o.data(), out.lse.data(), 0, cfg_.num_heads,
               path, &out.taken);
}

gqla_status Fixture::run_shards(int32_t layer, const std::vector<int>& seqs, int32_t s_q,
                                const std::vector<int32_t>& q_lens, const std::vector<float>& q, gqla_path path,
                                Output& out) const {
    const size_t rows = q.size() / static_cast<size_t>(q_dim());
    out.o.assign(rows * static_cast<size_t>(v_dim()), NAN);
    out.lse.assign(rows, NAN);
    const int32_t n_rep = cfg_.num_heads / cfg_.num_kv_heads;
    for (size_t i = 0; i < ranks_.size(); ++i) {
        const Shard& sh = opt_.shards[i];
        gqla_status st = run(ranks_[i], layer, ids_of(seqs, i + 1), s_q, q_lens, q.data(), out.o.data(), out.lse.data(),
                             sh.begin * n_rep, sh.count * n_rep, path, &out.taken);
        if (st != GQLA_OK) return st;
    }
    return GQLA_OK;
}

void Fixture::reference(int32_t layer, const std::vector<int>& seqs, const std::vector<int32_t>& q_lens,
                        const std::vector<float>& q, std::vector<double>& o, std::vector<double>& lse) const {
    const int H = cfg_.num_heads, G = cfg_.num_kv_heads, Dq = q_dim(), Dv = v_dim();
    const bool gqla = cfg_.kind == GQLA_KIND_GQLA;
    auto stored = [&](const std::vector<float>& v) {
        std::vector<double> d(v.size());
        for (size_t i = 0; i < v.size(); ++i) d[i] = abi::as_stored(v[i], cfg_.cache_dtype);
        return d;
    };
    std::vector<double> w;
    if (gqla) w.assign(w_[static_cast<size_t>(layer)].begin(), w_[static_cast<size_t>(layer)].end());
    o.clear();
    lse.clear();
    size_t row = 0;
    for (size_t b = 0; b < seqs.size(); ++b) {
        const Rows& rows = seqs_[static_cast<size_t>(seqs[b])].layers[static_cast<size_t>(layer)];
        const int n = q_lens[b];
        const int64_t L = static_cast<int64_t>(rows.b.size()) / (gqla ? cfg_.rope_dim : G * cfg_.value_dim);
        std::vector<double> qd(q.begin() + static_cast<int64_t>(row * H * Dq),
                               q.begin() + static_cast<int64_t>((row + n) * H * Dq));
        std::vector<double> ob(static_cast<size_t>(n * H * Dv)), lb(static_cast<size_t>(n * H));
        const std::vector<double> a = stored(rows.a), bb = stored(rows.b);
        if (gqla)
            gqla::ref::gqla_decode(H, G, cfg_.latent_dim, cfg_.nope_dim, cfg_.rope_dim, Dv, L, n, cfg_.softmax_scale,
                                   qd.data(), w.data(), a.data(), bb.data(), ob.data(), lb.data());
        else
            gqla::ref::gqa_decode(H, G, cfg_.head_dim, Dv, L, n, cfg_.softmax_scale, qd.data(), a.data(), bb.data(),
                                  ob.data(), lb.data());
        o.insert(o.end(), ob.begin(), ob.end());
        lse.insert(lse.end(), lb.begin(), lb.end());
        row += static_cast<size_t>(n);
    }
}

void Fixture::check_call(int32_t layer, const std::vector<int>& seqs, int32_t s_q, const std::vector<int32_t>& q_lens,
                         gqla_path path, double tol) {
    const std::vector<int32_t> lens = q_lens.empty() ? std::vector<int32_t>(seqs.size(), s_q) : q_lens;
    const std::vector<float> q = queries(lens);
    Output full, sharded;
    INFO(abi::replay_hint(seed_));
    INFO("path " << abi::path_label(path) << ", s_q " << s_q << ", ragged " << !q_lens.empty());
    ok(run_full(layer, seqs, s_q, q_lens, q, path, full));
    ok(run_shards(layer, seqs, s_q, q_lens, q, path, sharded));
    std::vector<double> ref_o, ref_lse;
    reference(layer, seqs, lens, q, ref_o, ref_lse);
    const std::vector<double> full_o(full.o.begin(), full.o.end()), shard_o(sharded.o.begin(), sharded.o.end());
    const std::vector<double> full_l(full.lse.begin(), full.lse.end()), shard_l(sharded.lse.begin(), sharded.lse.end());
    CHECK(gqla::ref::rel_l2(sharded.o.data(), ref_o.data(), ref_o.size()) <= tol);
    CHECK(gqla::ref::rel_l2(full.o.data(), ref_o.data(), ref_o.size()) <= tol);
    CHECK(gqla::ref::rel_l2(shard_o.data(), full_o.data(), full_o.size()) <= 2 * tol);
    CHECK(abi::lse_error(shard_l.data(), ref_lse.data(), ref_lse.size()) <= tol);
    CHECK(abi::lse_error(full_l.data(), ref_lse.data(), ref_lse.size()) <= tol);
}

}  // namespace shards

// SPDX-License-Identifier: Apache-2.0
// The backend's efficiency hook: what a backend reports replaces the device
// defaults per path and per term, and out-of-range values are ignored.
#include <doctest/doctest.h>

#include <algorithm>

#include "core/config.hpp"
#include "core/cost_model.hpp"
#include "core/session.hpp"
#include "test_core_fake_backend.hpp"

namespace {

// Reports a few valid factors and a few out-of-range ones the core must skip.
void partial_efficiency(const gqla_backend_desc*, gqla_backend_efficiency* inout) {
    inout->memory[1] = 0.5;
    inout->compute[1] = 0.25;
    inout->overhead_s[0] = 7e-6;
    inout->compute[0] = 100.0;    // above 64 (matrix units reach past 1, not that far): ignored
    inout->memory[0] = 0.0;       // not positive: ignored
    inout->overhead_s[1] = -1.0;  // negative: ignored
}

gqla_config tiny_gqla() {
    gqla_config c = gqla::default_config(GQLA_KIND_GQLA);
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.latent_dim = 8;
    c.nope_dim = 4;
    c.rope_dim = 2;
    c.value_dim = 3;
    c.num_layers = 1;
    c.cache_dtype = GQLA_DTYPE_F32;
    c.page_size = 4;
    c.max_tokens = 64;
    c.max_sequences = 2;
    c.path = GQLA_PATH_ABSORB;
    c.num_threads = 1;
    return c;
}

// Two sequences of 1000 cached tokens, one query each.
gqla_workload decode_workload() {
    gqla_workload w{};
    w.struct_size = sizeof(w);
    w.batch = 2;
    w.context = 1000;
    w.q_len = 1;
    return w;
}

double priced(const gqla_path_cost& c, double memory, double compute) {
    return std::max(c.memory_s / memory, c.compute_s / compute) + c.overhead_s;
}

// Absorb's attention on matrix units past the FMA peak, its projections
// priced apart.
void split_absorb_efficiency(const gqla_backend_desc*, gqla_backend_efficiency* inout) {
    inout->compute[1] = 2.0;
    inout->absorb_projection_compute = 0.25;
}

void bad_projection_efficiency(const gqla_backend_desc*, gqla_backend_efficiency* inout) {
    inout->absorb_projection_compute = 1.5;  // a projection factor above 1: ignored
}

}  // namespace

TEST_CASE("efficiency hook: valid reports replace the defaults, others are ignored") {
    gqla_backend_vtable vt = *fake::vtable();
    vt.efficiency = partial_efficiency;
    const gqla::Session s(tiny_gqla(), &vt);
    const gqla_cost_report r = s.predict_cost(decode_workload());

    const gqla::Efficiency d = gqla::default_efficiency(GQLA_DEVICE_CPU);
    CHECK(r.gqa.overhead_s == 7e-6);
    CHECK(r.gqa.time_s == doctest::Approx(priced(r.gqa, d.memory[0], d.compute[0])));
    CHECK(r.absorb.overhead_s == d.overhead_s[1]);
    CHECK(r.absorb.time_s == doctest::Approx(priced(r.absorb, 0.5, 0.25)));
}

TEST_CASE("efficiency hook: a backend without one gets the device defaults") {
    const gqla::Session s(tiny_gqla(), fake::vtable());
    gqla_workload w{};
    w.struct_size = sizeof(w);
    w.batch = 1;
    w.context = 100;
    w.q_len = 1;
    const gqla_cost_report r = s.predict_cost(w);
    const gqla::Efficiency d = gqla::default_efficiency(GQLA_DEVICE_CPU);
    CHECK(r.gqa.overhead_s == d.overhead_s[0]);
    CHECK(r.absorb.time_s == doctest::Approx(priced(r.absorb, d.memory[1], d.compute[1])));
}

namespace {

// A prefill kernel for calls of >= 16 queries and >= 32 rows per group
// (tiny_gqla has 2 heads per group), at a compute factor far from the GQA
// path's default, so the priced times tell which factor was used.
void prefill_efficiency(const gqla_backend_desc*, gqla_backend_efficiency* inout) {
    inout->compute[0] = 0.05;
    inout->prefill_compute = 0.5;
    inout->prefill_min_queries = 16;
    inout->prefill_min_rows = 32;
}
// The same factor with no domain: ignored as a whole.
void prefill_without_domain(const gqla_backend_desc*, gqla_backend_efficiency* inout) {
    inout->compute[0] = 0.05;
    inout->prefill_compute = 0.5;
}

gqla_cost_report report_for(const gqla::Session& s, int64_t q_len, int64_t topk = 0) {
    gqla_workload w{};
    w.struct_size = sizeof(w);
    w.batch = 1;
    w.context = 4096;
    w.q_len = q_len;
    w.topk = topk;
    return s.predict_cost(w);
}

}  // namespace

TEST_CASE("efficiency hook: the prefill factor prices dense GQA-form calls in its domain only") {
    gqla_backend_vtable vt = *fake::vtable();
    vt.efficiency = prefill_efficiency;
    const gqla::Session s(tiny_gqla(), &vt);
    const gqla::Efficiency d = gqla::default_efficiency(GQLA_DEVICE_CPU);
    // 16 queries x 2 heads per group = 32 rows: in the domain, on the GQA
    // path and the transient form alike.
    const gqla_cost_report in = report_for(s, 16);
    // Compute-bound at the GQA path's factor: the two prices differ.
    REQUIRE(in.gqa.compute_s / 0.05 > in.gqa.memory_s / d.memory[0]);
    CHECK(priced(in.gqa, d.memory[0], 0.5) < priced(in.gqa, d.memory[0], 0.05));
    CHECK(in.gqa.time_s == doctest::Approx(priced(in.gqa, d.memory[0], 0.5)));
    // 15 queries (30 rows) and decode: the GQA path's own factor.
    for (int64_t q : {15, 1}) {
        const gqla_cost_report out = report_for(s, q);
        CHECK(out.gqa.time_s == doctest::Approx(priced(out.gqa, d.memory[0], 0.05)));
    }
    // The transient form's attention part uses the same factor: at 0.5 it is
    // cheaper than at 0.05 by the difference of the two GQA-path prices.
    gqla_backend_vtable plain = *fake::vtable();
    plain.efficiency = prefill_without_domain;
    const gqla::Session s2(tiny_gqla(), &plain);
    const gqla_cost_report ignored = report_for(s2, 16);
    CHECK(ignored.gqa.time_s == doctest::Approx(priced(ignored.gqa, d.memory[0], 0.05)));
    CHECK(ignored.transient.time_s - in.transient.time_s ==
          doctest::Approx(ignored.gqa.time_s - in.gqa.time_s).epsilon(1e-6));
    // Sparse calls gather their rows: never the prefill kernel's price.
    const gqla_cost_report sparse = report_for(s, 16, 8);
    CHECK(sparse.gqa.time_s == doctest::Approx(priced(sparse.gqa, d.memory[0], 0.05)));
}

TEST_CASE("efficiency hook: a compute factor past 1, and absorb's projections priced at their own factor") {
    gqla_backend_vtable vt = *fake::vtable();
    vt.efficiency = split_absorb_efficiency;
    const gqla_config cfg = tiny_gqla();
    const gqla::Session s(cfg, &vt);
    const gqla_workload w = decode_workload();
    const gqla_cost_report r = s.predict_cost(w);
    const gqla::Efficiency d = gqla::default_efficiency(GQLA_DEVICE_CPU);

    // q~ = q_c W_UK and o = o~ W_UV^T: 2 (d_c + d_v) r FLOPs per head and query.
    const double projection_flops = 2.0 * cfg.num_heads * 2.0 * (cfg.nope_dim + cfg.value_dim) * cfg.latent_dim;
    const double peak = r.absorb.flops / r.absorb.compute_s;
    const double compute = (r.absorb.flops - projection_flops) / peak / 2.0 + projection_flops / peak / 0.25;
    REQUIRE(projection_flops < r.absorb.flops);
    CHECK(r.absorb.time_s == doctest::Approx(std::max(r.absorb.memory_s / d.memory[1], compute) + r.absorb.overhead_s));
    // The GQA path keeps the defaults.
    CHECK(r.gqa.time_s == doctest::Approx(priced(r.gqa, d.memory[0], d.compute[0])));

    vt.efficiency = bad_projection_efficiency;
    const gqla::Session plain(cfg, &vt);
    const gqla_cost_report p = plain.predict_cost(w);
    CHECK(p.absorb.time_s == doctest::Approx(priced(p.absorb, d.memory[1], d.compute[1])));
}

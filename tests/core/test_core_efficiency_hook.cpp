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
    inout->compute[0] = 2.0;       // above 1: ignored
    inout->memory[0] = 0.0;        // not positive: ignored
    inout->overhead_s[1] = -1.0;   // negative: ignored
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

double priced(const gqla_path_cost& c, double memory, double compute) {
    return std::max(c.memory_s / memory, c.compute_s / compute) + c.overhead_s;
}

}  // namespace

TEST_CASE("efficiency hook: valid reports replace the defaults, others are ignored") {
    gqla_backend_vtable vt = *fake::vtable();
    vt.efficiency = partial_efficiency;
    const gqla::Session s(tiny_gqla(), &vt);
    gqla_workload w{};
    w.struct_size = sizeof(w);
    w.batch = 2;
    w.context = 1000;
    w.q_len = 1;
    const gqla_cost_report r = s.predict_cost(w);

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

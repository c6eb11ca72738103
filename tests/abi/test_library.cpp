// SPDX-License-Identifier: Apache-2.0
// Library-level calls: version, status strings, config validation messages,
// probe and cost prediction.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "harness.hpp"

TEST_CASE("version macros equal the runtime version") {
    CHECK(gqla_version() == GQLA_VERSION);
    CHECK(GQLA_VERSION == GQLA_VERSION_MAJOR * 10000 + GQLA_VERSION_MINOR * 100 + GQLA_VERSION_PATCH);
    char expected[32];
    std::snprintf(expected, sizeof expected, "%d.%d.%d", GQLA_VERSION_MAJOR, GQLA_VERSION_MINOR, GQLA_VERSION_PATCH);
    REQUIRE(gqla_version_string() != nullptr);
    CHECK(std::string(gqla_version_string()) == expected);
}

TEST_CASE("every status has its own name") {
    const struct {
        gqla_status status;
        const char* name;
    } all[] = {{GQLA_OK, "GQLA_OK"},
               {GQLA_ERR_INVALID_ARGUMENT, "GQLA_ERR_INVALID_ARGUMENT"},
               {GQLA_ERR_OUT_OF_MEMORY, "GQLA_ERR_OUT_OF_MEMORY"},
               {GQLA_ERR_CAPACITY, "GQLA_ERR_CAPACITY"},
               {GQLA_ERR_UNSUPPORTED, "GQLA_ERR_UNSUPPORTED"},
               {GQLA_ERR_NOT_FOUND, "GQLA_ERR_NOT_FOUND"},
               {GQLA_ERR_INVALID_STATE, "GQLA_ERR_INVALID_STATE"},
               {GQLA_ERR_BACKEND, "GQLA_ERR_BACKEND"},
               {GQLA_ERR_INTERNAL, "GQLA_ERR_INTERNAL"}};
    for (const auto& s : all) {
        const char* text = gqla_status_string(s.status);
        REQUIRE(text != nullptr);
        CAPTURE(text);
        CHECK(abi::names_argument(text, {s.name}));  // the whole name, not a prefix of another
    }
    const char* unknown = gqla_status_string(static_cast<gqla_status>(1234));
    REQUIRE(unknown != nullptr);
    CHECK(std::strlen(unknown) > 0);
    // The pinned values themselves.
    CHECK(GQLA_ERR_INVALID_ARGUMENT == 1);
    CHECK(GQLA_ERR_CAPACITY == 3);
    CHECK(GQLA_ERR_INTERNAL == 8);
}

TEST_CASE("config validation names the first bad field") {
    struct Case {
        const char* field;
        void (*breakit)(gqla_config&);
        gqla_status expected;
    };
    const Case gqla_cases[] = {
        {"config.num_heads", [](gqla_config& c) { c.num_heads = 0; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.num_kv_heads", [](gqla_config& c) { c.num_kv_heads = 4; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.num_kv_heads", [](gqla_config& c) { c.num_kv_heads = 0; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.latent_dim", [](gqla_config& c) { c.latent_dim = 0; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.nope_dim", [](gqla_config& c) { c.nope_dim = -2; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.rope_dim", [](gqla_config& c) { c.rope_dim = 0; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.value_dim", [](gqla_config& c) { c.value_dim = 0; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.num_layers", [](gqla_config& c) { c.num_layers = 0; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.cache_dtype", [](gqla_config& c) { c.cache_dtype = static_cast<gqla_dtype>(9); },
         GQLA_ERR_INVALID_ARGUMENT},
        {"config.io_dtype", [](gqla_config& c) { c.io_dtype = static_cast<gqla_dtype>(0); }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.softmax_scale", [](gqla_config& c) { c.softmax_scale = -1.0f; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.softmax_scale", [](gqla_config& c) { c.softmax_scale = NAN; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.page_size", [](gqla_config& c) { c.page_size = 0; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.max_tokens", [](gqla_config& c) { c.max_tokens = -1; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.max_tokens", [](gqla_config& c) { c.max_tokens = INT64_MAX; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.memory_budget_bytes",
         [](gqla_config& c) {
             c.max_tokens = 0;
             c.memory_budget_bytes = 0;
         },
         GQLA_ERR_INVALID_ARGUMENT},
        {"config.max_sequences", [](gqla_config& c) { c.max_sequences = 0; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.max_batch", [](gqla_config& c) { c.max_batch = -1; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.max_q_len", [](gqla_config& c) { c.max_q_len = 0; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.device", [](gqla_config& c) { c.device = static_cast<gqla_device_type>(5); },
         GQLA_ERR_INVALID_ARGUMENT},
        {"config.path", [](gqla_config& c) { c.path = static_cast<gqla_path>(3); }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.num_threads", [](gqla_config& c) { c.num_threads = -4; }, GQLA_ERR_INVALID_ARGUMENT},
        {"config.kind", [](gqla_config& c) { c.kind = static_cast<gqla_kind>(3); }, GQLA_ERR_INVALID_ARGUMENT},
    };
    const gqla_config good = abi::odd_gqla_config(3);
    CHECK(gqla_config_validate(&good) == GQLA_OK);
    for (const Case& c : gqla_cases) {
        gqla_config cfg = good;
        c.breakit(cfg);
        CAPTURE(c.field);
        const gqla_status st = gqla_config_validate(&cfg);
        const std::string msg = gqla_last_error_message();
        CAPTURE(msg);
        CHECK(st == c.expected);
        CHECK(msg.find(c.field) != std::string::npos);
        // Creating a session from it fails the same way and leaves *out NULL.
        gqla_session* s = reinterpret_cast<gqla_session*>(0x1);
        CHECK(gqla_session_create(&cfg, &s) == c.expected);
        CHECK(s == nullptr);
        CHECK(std::string(gqla_last_error_message()).find(c.field) != std::string::npos);
    }

    // GQA specifics: head_dim required, ABSORB impossible.
    gqla_config gqa = abi::odd_gqa_config(3);
    CHECK(gqla_config_validate(&gqa) == GQLA_OK);
    gqla_config no_dim = gqa;
    no_dim.head_dim = 0;
    CHECK(gqla_config_validate(&no_dim) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(std::string(gqla_last_error_message()).find("config.head_dim") != std::string::npos);
    gqla_config absorb = gqa;
    absorb.path = GQLA_PATH_ABSORB;
    CHECK(gqla_config_validate(&absorb) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(std::string(gqla_last_error_message()).find("config.path") != std::string::npos);

    // The documented example message.
    gqla_config big = good;
    big.num_heads = 32;
    big.num_kv_heads = 5;
    CHECK(gqla_config_validate(&big) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(std::string(gqla_last_error_message()).find("config.num_kv_heads") != std::string::npos);
}

TEST_CASE("a session resolves its config") {
    gqla_config cfg = abi::odd_gqla_config(3);
    cfg.softmax_scale = 0.0f;
    cfg.num_threads = 0;
    cfg.max_tokens = 100;  // rounds up to whole pages of 16
    cfg.device = GQLA_DEVICE_CPU;
    gqla_session* s = nullptr;
    REQUIRE(gqla_session_create(&cfg, &s) == GQLA_OK);
    gqla_config got;
    std::memset(&got, 0, sizeof got);
    got.struct_size = sizeof got;
    REQUIRE(gqla_session_get_config(s, &got) == GQLA_OK);
    CHECK(got.device == GQLA_DEVICE_CPU);
    CHECK(got.num_threads >= 1);
    CHECK(got.softmax_scale == doctest::Approx(1.0 / std::sqrt(96.0 + 32.0)));
    CHECK(got.max_tokens == 112);
    CHECK(got.path == GQLA_PATH_ABSORB);
    CHECK(got.latent_dim == 384);
    gqla_stats st;
    std::memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    REQUIRE(gqla_session_stats(s, &st) == GQLA_OK);
    CHECK(st.pages_total == 7);
    CHECK(st.pages_free == 7);
    CHECK(st.pages_used == 0);
    CHECK(st.token_capacity_left == 112);
    CHECK(st.page_size == 16);
    CHECK(st.device == GQLA_DEVICE_CPU);
    gqla_session_destroy(s);
}

TEST_CASE("every ISA bit of the header has one name, and nothing else has") {
    const uint64_t defined[] = {GQLA_ISA_SSE42,      GQLA_ISA_AVX,        GQLA_ISA_AVX2,     GQLA_ISA_FMA,
                                GQLA_ISA_F16C,       GQLA_ISA_AVX512F,    GQLA_ISA_AVX512BW, GQLA_ISA_AVX512VL,
                                GQLA_ISA_AVX512BF16, GQLA_ISA_AVX512FP16, GQLA_ISA_AMX};
    uint64_t all = 0;
    std::vector<std::string> names;
    for (uint64_t bit : defined) {
        all |= bit;
        const char* name = gqla_isa_name(bit);
        REQUIRE(name != nullptr);
        CHECK(std::strlen(name) > 0);
        for (const std::string& earlier : names) CHECK(earlier != name);
        names.emplace_back(name);
    }
    CHECK(std::string(gqla_isa_name(GQLA_ISA_AVX512BF16)) == "avx512_bf16");  // as /proc/cpuinfo
    for (int b = 0; b < 64; ++b)
        if (!(all & (uint64_t{1} << b))) CHECK(gqla_isa_name(uint64_t{1} << b) == nullptr);
    CHECK(gqla_isa_name(0) == nullptr);
    CHECK(gqla_isa_name(GQLA_ISA_AVX2 | GQLA_ISA_FMA) == nullptr);
}

TEST_CASE("probe reports a sane CPU") {
    int32_t n = 0;
    REQUIRE(gqla_device_count(GQLA_DEVICE_CPU, &n) == GQLA_OK);
    CHECK(n == 1);
    gqla_probe_info p;
    std::memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    INFO(std::string(gqla_last_error_message()));
    REQUIRE(gqla_probe(GQLA_DEVICE_CPU, 0, 0, &p) == GQLA_OK);
    CHECK(p.device == GQLA_DEVICE_CPU);
    CHECK(std::strlen(p.vendor) > 0);
    CHECK(std::strlen(p.name) > 0);
    CHECK(std::strlen(p.vendor) < sizeof p.vendor);
    CHECK(p.logical_cores >= 1);
    CHECK(p.physical_cores >= 1);
    CHECK(p.physical_cores <= p.logical_cores);
    CHECK(p.affinity_cores >= 1);
    CHECK(p.affinity_cores <= p.logical_cores);
#if defined(__x86_64__)
    CHECK((p.isa_flags & GQLA_ISA_SSE42) != 0);  // every x86-64 this library targets
    if (__builtin_cpu_supports("avx2")) CHECK((p.isa_flags & GQLA_ISA_AVX2) != 0);
    if (!__builtin_cpu_supports("avx512f")) CHECK((p.isa_flags & GQLA_ISA_AVX512F) == 0);
#endif
    CHECK(p.read_gbps > 0.5);
    CHECK(p.read_gbps < 10000.0);
    CHECK(p.peak_gflops_f32 > 1.0);
    CHECK(p.peak_gflops_f32 < 1e6);
    CHECK(p.l1d_kb > 0);
    CHECK(p.l2_kb >= p.l1d_kb);

    gqla_probe_info c;
    std::memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    REQUIRE(gqla_probe(GQLA_DEVICE_CPU, 0, GQLA_PROBE_CALIBRATE, &c) == GQLA_OK);
    // A measurement may be given up on an overloaded host (then the numbers
    // are estimates); either way only their sanity is asserted: positive,
    // finite, not beyond any CPU.
    CHECK((c.calibrated == 0 || c.calibrated == 1));
    CHECK(c.read_gbps > 0.0);
    CHECK(c.read_gbps < 10000.0);
    CHECK(c.peak_gflops_f32 > 0.0);
    CHECK(c.peak_gflops_f32 < 1e6);

    int32_t cuda = -1;
    REQUIRE(gqla_device_count(GQLA_DEVICE_CUDA, &cuda) == GQLA_OK);
    CHECK(cuda >= 0);
    if (cuda == 0) {
        gqla_probe_info g;
        std::memset(&g, 0, sizeof g);
        g.struct_size = sizeof g;
        CHECK(gqla_probe(GQLA_DEVICE_CUDA, 0, 0, &g) == GQLA_ERR_UNSUPPORTED);
        gqla_config cfg = abi::odd_gqla_config(3);
        cfg.device = GQLA_DEVICE_CUDA;
        gqla_session* s = reinterpret_cast<gqla_session*>(0x1);
        CHECK(gqla_session_create(&cfg, &s) == GQLA_ERR_UNSUPPORTED);
        CHECK(s == nullptr);
    }
}

namespace {

gqla_probe_info spec_probe(double tflops, double tbps) {
    gqla_probe_info p;
    std::memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.device = GQLA_DEVICE_CUDA;
    std::snprintf(p.name, sizeof p.name, "spec sheet");
    p.read_gbps = tbps * 1000.0;
    p.peak_gflops_f32 = tflops * 1000.0 / 16.0;
    p.peak_gflops_bf16 = tflops * 1000.0;
    return p;
}

gqla_config llama3_8b_gqla() {
    gqla_config cfg;
    REQUIRE(gqla_config_default(&cfg, GQLA_KIND_GQLA) == GQLA_OK);
    cfg.num_heads = 32;
    cfg.num_kv_heads = 8;
    cfg.latent_dim = 512;
    cfg.nope_dim = 64;
    cfg.rope_dim = 64;
    cfg.value_dim = 128;
    cfg.num_layers = 1;
    cfg.cache_dtype = GQLA_DTYPE_BF16;
    cfg.max_tokens = 1 << 16;
    return cfg;
}

// `same_efficiency`: the prediction used one efficiency for the memory and the
// compute term (session-less predict_cost), so the bound follows the raw
// terms. A session's backend may price the two terms differently; then the
// bound only has to be one of the two.
void check_consistent(const gqla_path_cost& c, bool same_efficiency = true) {
    CHECK(c.bytes > 0);
    CHECK(c.flops > 0);
    CHECK(c.memory_s > 0);
    CHECK(c.compute_s > 0);
    CHECK(c.overhead_s >= 0);
    CHECK(c.time_s >= std::max(c.memory_s, c.compute_s) + c.overhead_s - 1e-15);
    if (same_efficiency)
        CHECK(c.bound == (c.memory_s >= c.compute_s ? GQLA_BOUND_MEMORY : GQLA_BOUND_COMPUTE));
    else
        CHECK((c.bound == GQLA_BOUND_MEMORY || c.bound == GQLA_BOUND_COMPUTE));
}

}  // namespace

TEST_CASE("predict_cost: absorb reads fewer bytes, fields agree, the worked checks of docs/cost-model.md hold") {
    const gqla_config cfg = llama3_8b_gqla();
    const gqla_probe_info h100 = spec_probe(990, 3.35), h20 = spec_probe(148, 4.0);
    for (int32_t s_q : {1, 2}) {
        gqla_workload w{sizeof(gqla_workload), 16, 4096, s_q, 0};
        gqla_cost_report r;
        std::memset(&r, 0, sizeof r);
        r.struct_size = sizeof r;
        INFO(std::string(gqla_last_error_message()));
        REQUIRE(gqla_predict_cost(&cfg, &h100, &w, &r) == GQLA_OK);
        CHECK(r.absorb.bytes < r.gqa.bytes);
        check_consistent(r.gqa);
        check_consistent(r.absorb);
        // Memory time is bytes over bandwidth.
        CHECK(r.gqa.memory_s == doctest::Approx(r.gqa.bytes / (h100.read_gbps * 1e9)).epsilon(1e-6));
        CHECK(r.absorb.memory_s == doctest::Approx(r.absorb.bytes / (h100.read_gbps * 1e9)).epsilon(1e-6));
        // FLOPs per cached token and head from docs/cost-model.md (lower bounds: the
        // absorb path adds its projections).
        const double tokens_heads = 16.0 * 4096.0 * s_q * 32.0;
        CHECK(r.gqa.flops >= tokens_heads * (2 * (64 + 64) + 2 * 128) * 0.99);
        CHECK(r.absorb.flops >= tokens_heads * (2 * (512 + 64) + 2 * 512) * 0.99);
        CHECK(r.expand_bytes > 0);
        CHECK(r.expand_flops > 0);
        CHECK(r.expand_s > 0);
        CHECK(r.chosen == GQLA_PATH_ABSORB);  // H100-like: absorb for s_q 1 and 2

        REQUIRE(gqla_predict_cost(&cfg, &h20, &w, &r) == GQLA_OK);
        CHECK(r.chosen == (s_q == 1 ? GQLA_PATH_ABSORB : GQLA_PATH_GQA));
        if (s_q == 2) CHECK(r.absorb.bound == GQLA_BOUND_COMPUTE);
    }

    // DeepSeek-V3 MLA picks absorb everywhere.
    gqla_config v3 = cfg;
    v3.num_heads = v3.num_kv_heads = 128;
    v3.nope_dim = 128;
    v3.value_dim = 128;
    for (const gqla_probe_info& p : {h100, h20})
        for (int32_t s_q : {1, 2, 4}) {
            gqla_workload w{sizeof(gqla_workload), 8, 8192, s_q, 0};
            gqla_cost_report r;
            r.struct_size = sizeof r;
            REQUIRE(gqla_predict_cost(&v3, &p, &w, &r) == GQLA_OK);
            CHECK(r.chosen == GQLA_PATH_ABSORB);
        }

    // GQA kind: only the GQA path, absorb zeroed.
    gqla_config gqa;
    REQUIRE(gqla_config_default(&gqa, GQLA_KIND_GQA) == GQLA_OK);
    gqa.num_heads = 32;
    gqa.num_kv_heads = 8;
    gqa.head_dim = 128;
    gqa.num_layers = 1;
    gqa.max_tokens = 1 << 16;
    gqla_workload w{sizeof(gqla_workload), 4, 1000, 1, 0};
    gqla_cost_report r;
    r.struct_size = sizeof r;
    REQUIRE(gqla_predict_cost(&gqa, &h100, &w, &r) == GQLA_OK);
    check_consistent(r.gqa);
    CHECK(r.absorb.bytes == 0);
    CHECK(r.chosen == GQLA_PATH_GQA);

    // A live session on the CPU predicts with its own probe.
    gqla_config small = abi::odd_gqla_config(3);
    gqla_session* s = nullptr;
    REQUIRE(gqla_session_create(&small, &s) == GQLA_OK);
    REQUIRE(gqla_session_predict_cost(s, &w, &r) == GQLA_OK);
    check_consistent(r.gqa, false);
    check_consistent(r.absorb, false);
    CHECK(r.absorb.bytes < r.gqa.bytes);
    gqla_session_destroy(s);
}

TEST_CASE("the argument-name check accepts whole identifiers only") {
    // The error-matrix assertions rely on this helper being strict.
    CHECK(abi::names_argument("q: expected 4 dims", {"q"}));
    CHECK(abi::names_argument("seqs[1]: unknown sequence id 7", {"seqs"}));
    CHECK(abi::names_argument("config.num_kv_heads: 5 does not divide", {"num_kv_heads"}));
    CHECK_FALSE(abi::names_argument("seq_q: wrong", {"q", "seq"}));
    CHECK_FALSE(abi::names_argument("layers out of range", {"layer"}));
    CHECK_FALSE(abi::names_argument("", {"session"}));
}

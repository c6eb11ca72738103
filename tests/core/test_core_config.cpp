// SPDX-License-Identifier: Apache-2.0
// Config defaults, validation messages and resolution.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "core/config.hpp"
#include "core/error.hpp"

namespace {

gqla_config gqa_config() {
    gqla_config c = gqla::default_config(GQLA_KIND_GQA);
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    return c;
}

gqla_config gqla_config_() {
    gqla_config c = gqla::default_config(GQLA_KIND_GQLA);
    c.num_heads = 6;
    c.num_kv_heads = 2;
    c.latent_dim = 384;
    c.nope_dim = 96;
    c.rope_dim = 32;
    c.value_dim = 80;
    return c;
}

// The message of the INVALID_ARGUMENT validate_config throws ("" if none).
std::string invalid(const gqla_config& c) {
    try {
        gqla::validate_config(c);
    } catch (const gqla::Error& e) {
        CHECK(e.status() == GQLA_ERR_INVALID_ARGUMENT);
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("config: defaults") {
    gqla_config c = gqla::default_config(GQLA_KIND_GQLA);
    CHECK(c.struct_size == sizeof(gqla_config));
    CHECK(c.kind == GQLA_KIND_GQLA);
    CHECK(c.cache_dtype == GQLA_DTYPE_BF16);
    CHECK(c.io_dtype == GQLA_DTYPE_F32);
    CHECK(c.page_size == 64);
    CHECK(c.max_tokens == 65536);
    CHECK(c.max_sequences == 256);
    CHECK(c.max_batch == 256);
    CHECK(c.max_q_len == 16);
    CHECK(c.device == GQLA_DEVICE_AUTO);
    CHECK(c.path == GQLA_PATH_AUTO);
    CHECK(c.num_layers == 1);
    CHECK(c.num_threads == 0);
    CHECK(c.num_heads == 0);
    CHECK_THROWS_AS(gqla::default_config(static_cast<gqla_kind>(9)), gqla::Error);
}

TEST_CASE("config: validation names the first bad field") {
    CHECK(invalid(gqa_config()) == "");
    CHECK(invalid(gqla_config_()) == "");

    gqla_config c = gqa_config();
    c.num_kv_heads = 5;
    CHECK(invalid(c) == "config.num_kv_heads: 5 does not divide num_heads 32");
    c = gqa_config();
    c.head_dim = 0;
    CHECK(invalid(c).find("config.head_dim: expected 1..4096") == 0);
    c = gqa_config();
    c.head_dim = 5000;
    CHECK(invalid(c).find("got 5000") != std::string::npos);
    c = gqla_config_();
    c.rope_dim = 0;
    CHECK(invalid(c).find("config.rope_dim:") == 0);
    c = gqla_config_();
    c.value_dim = 0;
    CHECK(invalid(c).find("config.value_dim:") == 0);
    c = gqla_config_();
    c.latent_dim = 70000;
    CHECK(invalid(c).find("config.latent_dim: expected 1..65536") == 0);
    c = gqa_config();
    c.page_size = 0;
    CHECK(invalid(c) == "config.page_size: expected 1..4096, got 0");
    c = gqa_config();
    c.cache_dtype = static_cast<gqla_dtype>(7);
    CHECK(invalid(c).find("config.cache_dtype:") == 0);
    c = gqa_config();
    c.path = GQLA_PATH_ABSORB;
    CHECK(invalid(c).find("config.path:") == 0);
    c = gqa_config();
    c.softmax_scale = -1.0f;
    CHECK(invalid(c).find("config.softmax_scale:") == 0);
    c = gqa_config();
    c.max_tokens = 0;
    CHECK(invalid(c).find("config.memory_budget_bytes: expected > 0") == 0);
    c = gqa_config();
    c.max_tokens = int64_t(1) << 62;  // page ids are int32
    CHECK(invalid(c).find("config.max_tokens:") == 0);
    c = gqa_config();
    c.device = static_cast<gqla_device_type>(3);
    CHECK(invalid(c).find("config.device:") == 0);
    c = gqa_config();
    c.num_threads = -2;
    CHECK(invalid(c).find("config.num_threads:") == 0);
}

TEST_CASE("config: struct_size") {
    gqla_config c = gqa_config();
    c.struct_size = 8;
    CHECK_THROWS_WITH_AS(gqla::read_config(&c), doctest::Contains("cfg->struct_size: expected >= "), gqla::Error);
    c.struct_size = gqla::kConfigV1Size;  // an exact v1 struct is enough
    CHECK(gqla::read_config(&c).num_heads == 32);
    CHECK_THROWS_AS(gqla::read_config(nullptr), gqla::Error);
}

TEST_CASE("config: resolution") {
    gqla_config c = gqa_config();
    c.max_tokens = 100;  // rounded up to 2 pages of 64
    c.max_sequences = 4;
    gqla_config r = gqla::resolve_config(c, GQLA_DEVICE_CPU);
    CHECK(r.max_tokens == 128);
    CHECK(r.value_dim == 128);
    CHECK(r.softmax_scale == doctest::Approx(1.0 / std::sqrt(128.0)));
    CHECK(r.num_threads >= 1);
    CHECK(r.max_batch == 4);  // a batch cannot hold more than the live sequences
    CHECK(r.device == GQLA_DEVICE_CPU);

    gqla_config g = gqla_config_();
    g.softmax_scale = 0.5f;
    gqla_config rg = gqla::resolve_config(g, GQLA_DEVICE_CPU);
    CHECK(rg.softmax_scale == 0.5f);
    CHECK(rg.head_dim == 96 + 32);
    g.softmax_scale = 0;
    CHECK(gqla::resolve_config(g, GQLA_DEVICE_CPU).softmax_scale == doctest::Approx(1.0 / std::sqrt(128.0)));

    // Budget: bf16 latent (384 + 32) * 2 bytes per token, 2 layers, pages of 64.
    g.max_tokens = 0;
    g.num_layers = 2;
    g.memory_budget_bytes = (384 + 32) * 2 * 2 * 64 * 10 + 5;
    CHECK(gqla::resolve_config(g, GQLA_DEVICE_CPU).max_tokens == 640);
    g.memory_budget_bytes = 100;
    CHECK_THROWS_WITH_AS(gqla::resolve_config(g, GQLA_DEVICE_CPU), doctest::Contains("hold no page"), gqla::Error);
}

TEST_CASE("config: the page count is capped before anything is allocated") {
    // 8 bytes of bookkeeping per page: 2^31 - 1 pages of one token would be
    // 16 GiB of it, so validation refuses them up front.
    gqla_config c = gqa_config();
    c.page_size = 1;
    c.max_tokens = std::numeric_limits<int32_t>::max();
    CHECK(invalid(c).find("config.max_tokens: 2147483647 needs 2147483647 pages of 1 tokens, more than the limit "
                          "of 16777216 pages") == 0);
    c.max_tokens = gqla::kMaxPages + 1;
    CHECK(invalid(c).find("config.max_tokens:") == 0);
    c.max_tokens = gqla::kMaxPages;  // the limit itself is fine
    CHECK(invalid(c) == "");
    CHECK(gqla::resolve_num_pages(c) == gqla::kMaxPages);
    c.page_size = 64;
    c.max_tokens = gqla::kMaxPages * 64;
    CHECK(invalid(c) == "");
    c.max_tokens += 1;  // rounds up to one page more
    CHECK(invalid(c).find("config.max_tokens:") == 0);

    c = gqa_config();  // 8 KV heads x (128 + 128) x 2 bytes = 4096 bytes per token
    c.max_tokens = 0;
    c.memory_budget_bytes = std::numeric_limits<int64_t>::max();
    const std::string message = invalid(c);
    CHECK(message.find("config.memory_budget_bytes: 9223372036854775807 bytes hold") == 0);
    CHECK(message.find("more than the limit of 16777216 pages") != std::string::npos);
    const int64_t page_bytes = int64_t(64) * 8 * (128 + 128) * 2;
    c.memory_budget_bytes = gqla::kMaxPages * page_bytes + page_bytes - 1;  // the largest budget accepted
    CHECK(invalid(c) == "");
    CHECK(gqla::resolve_num_pages(c) == gqla::kMaxPages);
    c.memory_budget_bytes += 1;
    CHECK(invalid(c).find("config.memory_budget_bytes:") == 0);
}

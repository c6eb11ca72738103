// SPDX-License-Identifier: Apache-2.0
// SessionFuzz (session_fuzz.hpp): construction, the step that picks one
// random operation, and the comparison of the session with the shadow model
// after every call (stats, bytes per token, sequence lengths, the path; a
// refused call must leave the stats exactly as they were).
#include "tests/fuzz/session_fuzz.hpp"

#include <cstring>

#include "tests/fuzz/random_configs.hpp"

namespace fuzz {

SessionFuzz::SessionFuzz(Random& r, gqla_session* s, const gqla_config& resolved)
    : r_(r), s_(s), shadow_(shard_view(resolved)), session_cfg_(resolved), cfg_(shard_view(resolved)) {
    // The resolved config carries the active path; what was requested
    // decides whether decodes may switch it (AUTO on a GQLA session).
    gqla_path active = GQLA_PATH_AUTO, requested = GQLA_PATH_AUTO;
    Expect ok;
    check_status("gqla_get_path", gqla_get_path(s_, &active, &requested), ok);
    requested_ = requested;
    if (cfg_.kind == GQLA_KIND_GQA || !shadow_.keeps_latent())
        expected_path_ = GQLA_PATH_GQA;  // the only path
    else if (requested != GQLA_PATH_AUTO)
        expected_path_ = requested;
    verify(true, nullptr);
}

void SessionFuzz::step() {
    gqla_stats before = stats();
    bool accepted = false;
    // The first version's operations are drawn from 0..99, those of the
    // features that are on (fuzz_run.hpp) from the numbers after them.
    int64_t top = 99;
    const int64_t attention_at = top + 1;
    if (run.features.attention) top += 20;
    const int64_t io_at = top + 1;
    if (run.features.sequence_io) top += 8;
    const int64_t what = r_.range(0, top);
    if (what >= io_at)
        accepted = what < io_at + 4 ? op_export() : op_import();
    else if (what >= attention_at)
        accepted = op_attention();
    else if (what < 10)
        accepted = op_add();
    else if (what < 15)
        accepted = op_release();
    else if (what < 20)
        accepted = op_fork();
    else if (what < 45)
        accepted = op_append();
    else if (what < 55)
        accepted = op_append_batch();
    else if (what < 80)
        accepted = op_decode();
    else if (what < 84)
        accepted = op_select_path();
    else if (what < 88)
        accepted = op_set_weights();
    else if (what < 95)
        accepted = op_getters();
    else
        accepted = op_bad_pointers();
    verify(accepted, &before);
}

gqla_stats SessionFuzz::stats() {
    gqla_stats st;
    std::memset(&st, 0, sizeof(st));
    st.struct_size = sizeof(st);
    gqla_status rc = gqla_session_stats(s_, &st);
    if (rc != GQLA_OK) fail("gqla_session_stats: %s", gqla_last_error_message());
    return st;
}

void SessionFuzz::verify(bool accepted, const gqla_stats* before) {
    const char* saved = run.op;
    run.op = accepted ? "verify after an accepted call" : "verify after a refused call";
    gqla_stats st = stats();
    if (!accepted && before != nullptr && std::memcmp(&st, before, sizeof(st)) != 0)
        fail(
            "a refused call changed the session's stats (pages_used %lld -> %lld, sequences %lld -> %lld, "
            "tokens %lld -> %lld, path %d -> %d, expanded %lld -> %lld)",
            (long long)before->pages_used, (long long)st.pages_used, (long long)before->sequences,
            (long long)st.sequences, (long long)before->tokens_cached, (long long)st.tokens_cached, int(before->path),
            int(st.path), (long long)before->expanded_bytes, (long long)st.expanded_bytes);
    auto expect_eq = [](const char* field, int64_t got, int64_t want) {
        if (got != want) fail("stats.%s is %lld, the shadow model says %lld", field, (long long)got, (long long)want);
    };
    expect_eq("pages_total", st.pages_total, shadow_.pages_total());
    expect_eq("pages_used", st.pages_used, shadow_.pages_used());
    expect_eq("pages_free", st.pages_free, shadow_.pages_total() - shadow_.pages_used());
    expect_eq("sequences", st.sequences, shadow_.sequences());
    expect_eq("tokens_cached", st.tokens_cached, shadow_.tokens_cached());
    expect_eq("token_capacity_left", st.token_capacity_left, st.pages_free * cfg_.page_size);
    expect_eq("page_size", st.page_size, cfg_.page_size);
    // The device the session resolved to at create (AUTO: CUDA on a GPU host).
    if (st.device != session_cfg_.device)
        fail("stats.device is %d, the session was created on %d", int(st.device), int(session_cfg_.device));
    if (expected_path_ != GQLA_PATH_AUTO) expect_eq("path", st.path, expected_path_);
    if (st.path != GQLA_PATH_GQA && st.path != GQLA_PATH_ABSORB) fail("stats.path is %d", int(st.path));
    if (cfg_.kind == GQLA_KIND_GQLA && st.path == GQLA_PATH_ABSORB && st.expanded_bytes != 0)
        fail("absorb path active but %lld expanded bytes allocated", (long long)st.expanded_bytes);
    if (!shadow_.keeps_latent() && (st.path != GQLA_PATH_GQA || st.expanded_bytes == 0))
        fail("keep_latent = 0: path %d with %lld expanded bytes (the expanded cache is its only cache)", int(st.path),
             (long long)st.expanded_bytes);
    int64_t kept = 0, expanded = 0;
    bytes_per_token(cfg_, &kept, &expanded);
    expect_eq("kept_bytes_per_token", st.kept_bytes_per_token, kept);
    expect_eq("expanded_bytes_per_token", st.expanded_bytes_per_token, expanded);
    if (st.latent_bytes < 0 || st.expanded_bytes < 0 || st.weight_bytes < 0 || st.workspace_bytes < 0)
        fail("negative byte counts in stats");
    for (gqla_seq_id id : shadow_.live())
        for (int32_t l = 0; l < cfg_.num_layers; ++l) {
            int64_t len = -1;
            gqla_status rc = gqla_sequence_length(s_, id, l, &len);
            if (rc != GQLA_OK) fail("gqla_sequence_length(%lld, %d): %s", (long long)id, l, gqla_last_error_message());
            if (len != shadow_.length(id, l))
                fail("sequence %lld layer %d has length %lld, the shadow model says %lld", (long long)id, l,
                     (long long)len, (long long)shadow_.length(id, l));
        }
    run.op = saved;
}

}  // namespace fuzz

/* SPDX-License-Identifier: Apache-2.0 */
/* gqla from C: a small GQLA (group-query latent attention) layer decoded on
 * both paths — the expanded per-group "GQA path" and the latent "absorb path"
 * — which must agree, followed by a plain GQA session.
 *
 * Build: cc gqla_example.c $(pkg-config --cflags --libs gqla) -lm */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <gqla/gqla.h>

/* LLaMA-3-8B-GQLA-like head layout, shrunk: H query heads over G groups. */
enum { H = 8, G = 2, R = 128, DC = 32, DR = 16, DV = 32, TOKENS = 300, SQ = 1 };

#define CHECK(call)                                                                                              \
    do {                                                                                                         \
        gqla_status st_ = (call);                                                                                \
        if (st_ != GQLA_OK) {                                                                                    \
            fprintf(stderr, "%s failed: %s\n  %s\n", #call, gqla_status_string(st_), gqla_last_error_message()); \
            exit(1);                                                                                             \
        }                                                                                                        \
    } while (0)

/* Uniform in [-1, 1): a tiny LCG keeps the example free of dependencies. */
static float random_value(void) {
    static unsigned long long state = 0x9e3779b97f4a7c15ull;
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void fill(float* p, size_t n, float scale) {
    size_t i;
    for (i = 0; i < n; ++i) p[i] = scale * random_value();
}

static double relative_difference(const float* a, const float* b, size_t n) {
    double diff = 0.0, norm = 0.0;
    size_t i;
    for (i = 0; i < n; ++i) {
        diff += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        norm += (double)b[i] * b[i];
    }
    return sqrt(diff / norm);
}

static int gqla_demo(void) {
    static float w[G * (DC + DV) * R], c[TOKENS * R], kr[TOKENS * DR], q[SQ * H * (DC + DR)];
    static float o_absorb[SQ * H * DV], o_gqa[SQ * H * DV];
    int64_t w_shape[2] = {G * (DC + DV), R}, c_shape[2] = {TOKENS, R}, kr_shape[2] = {TOKENS, DR};
    int64_t q_shape[4] = {1, SQ, H, DC + DR}, o_shape[4] = {1, SQ, H, DV};
    gqla_tensor tw, tc, tkr, tq, to;
    gqla_config cfg;
    gqla_session* session = NULL;
    gqla_seq_id seq;
    gqla_stats stats;
    double diff;

    CHECK(gqla_config_default(&cfg, GQLA_KIND_GQLA));
    cfg.num_heads = H;
    cfg.num_kv_heads = G;
    cfg.latent_dim = R;
    cfg.nope_dim = DC;
    cfg.rope_dim = DR;
    cfg.value_dim = DV;
    cfg.num_layers = 1;
    cfg.cache_dtype = GQLA_DTYPE_F32; /* f32 so the two paths can be compared tightly */
    cfg.max_tokens = 4096;
    cfg.path = GQLA_PATH_ABSORB;
    CHECK(gqla_session_create(&cfg, &session));

    /* kv_b_proj.weight of the layer: per group, DC rows of W_UK then DV rows of W_UV. */
    fill(w, sizeof w / sizeof w[0], 1.0f / sqrtf((float)R));
    CHECK(gqla_tensor_init(&tw, w, GQLA_DTYPE_F32, 2, w_shape));
    CHECK(gqla_set_weights(session, 0, &tw));

    /* The prompt's latents c = kv_a_proj(x) and rope keys kr (RoPE applied). */
    fill(c, sizeof c / sizeof c[0], 1.0f);
    fill(kr, sizeof kr / sizeof kr[0], 1.0f);
    CHECK(gqla_tensor_init(&tc, c, GQLA_DTYPE_F32, 2, c_shape));
    CHECK(gqla_tensor_init(&tkr, kr, GQLA_DTYPE_F32, 2, kr_shape));
    CHECK(gqla_sequence_add(session, &seq));
    CHECK(gqla_append(session, 0, seq, &tc, &tkr));

    fill(q, sizeof q / sizeof q[0], 1.0f);
    CHECK(gqla_tensor_init(&tq, q, GQLA_DTYPE_F32, 4, q_shape));

    CHECK(gqla_tensor_init(&to, o_absorb, GQLA_DTYPE_F32, 4, o_shape));
    CHECK(gqla_decode(session, 0, 1, &seq, &tq, &to, NULL));

    CHECK(gqla_select_path(session, GQLA_PATH_GQA)); /* expands the cached latents */
    stats.struct_size = sizeof stats;
    CHECK(gqla_session_stats(session, &stats));
    CHECK(gqla_tensor_init(&to, o_gqa, GQLA_DTYPE_F32, 4, o_shape));
    CHECK(gqla_decode(session, 0, 1, &seq, &tq, &to, NULL));

    diff = relative_difference(o_absorb, o_gqa, sizeof o_gqa / sizeof o_gqa[0]);
    printf("GQLA H=%d G=%d r=%d, %d tokens: absorb vs GQA path relative L2 difference %.2e\n", H, G, R, TOKENS, diff);
    printf("  latent cache %lld bytes, expanded cache %lld bytes\n", (long long)stats.latent_bytes,
           (long long)stats.expanded_bytes);
    gqla_session_destroy(session);
    if (!(diff <= 1e-5)) {
        fprintf(stderr, "the two paths disagree\n");
        return 1;
    }
    return 0;
}

static int gqa_demo(void) {
    enum { GH = 8, GG = 2, D = 64, L = 100 };
    static float k[L * GG * D], v[L * GG * D], q[GH * D], o[GH * D], lse[GH];
    int64_t kv_shape[3] = {L, GG, D}, q_shape[4] = {1, 1, GH, D}, lse_shape[3] = {1, 1, GH};
    gqla_tensor tk, tv, tq, to, tl;
    gqla_config cfg;
    gqla_session* session = NULL;
    gqla_seq_id seq;

    CHECK(gqla_config_default(&cfg, GQLA_KIND_GQA));
    cfg.num_heads = GH;
    cfg.num_kv_heads = GG;
    cfg.head_dim = D;
    cfg.cache_dtype = GQLA_DTYPE_BF16;
    cfg.max_tokens = 1024;
    CHECK(gqla_session_create(&cfg, &session));
    fill(k, sizeof k / sizeof k[0], 1.0f);
    fill(v, sizeof v / sizeof v[0], 1.0f);
    fill(q, sizeof q / sizeof q[0], 1.0f);
    CHECK(gqla_tensor_init(&tk, k, GQLA_DTYPE_F32, 3, kv_shape));
    CHECK(gqla_tensor_init(&tv, v, GQLA_DTYPE_F32, 3, kv_shape));
    CHECK(gqla_tensor_init(&tq, q, GQLA_DTYPE_F32, 4, q_shape));
    CHECK(gqla_tensor_init(&to, o, GQLA_DTYPE_F32, 4, q_shape));
    CHECK(gqla_tensor_init(&tl, lse, GQLA_DTYPE_F32, 3, lse_shape));
    CHECK(gqla_sequence_add(session, &seq));
    CHECK(gqla_append(session, 0, seq, &tk, &tv));
    CHECK(gqla_decode(session, 0, 1, &seq, &tq, &to, &tl));
    printf("GQA H=%d G=%d D=%d, %d tokens: o[0][0] = %.4f, lse[0] = %.4f\n", GH, GG, D, L, o[0], lse[0]);
    gqla_session_destroy(session);
    return isfinite(o[0]) && isfinite(lse[0]) ? 0 : 1;
}

int main(void) {
    printf("gqla %s\n", gqla_version_string());
    return gqla_demo() || gqa_demo();
}

/* SPDX-License-Identifier: Apache-2.0 */
/* A strict C99 user of gqla.h: creates a GQLA session, appends one token and
 * decodes it. With a single cached token attention returns that token's value
 * W_UV[g] c for every head of group g, which is checked here in plain C. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gqla/gqla.h"

#define H 4
#define G 2
#define R 8
#define DC 4
#define DR 2
#define DV 3

static int fail(const char* what, gqla_status st) {
    fprintf(stderr, "%s failed: %s (%s)\n", what, gqla_status_string(st), gqla_last_error_message());
    return 1;
}

int main(void) {
    gqla_config cfg;
    gqla_session* session = NULL;
    gqla_seq_id seq = 0;
    gqla_tensor tw, tc, tkr, tq, to;
    static float w[G * (DC + DV) * R], c[R], kr[DR], q[H * (DC + DR)], o[H * DV];
    int64_t w_shape[2] = {G * (DC + DV), R}, c_shape[2] = {1, R}, kr_shape[2] = {1, DR};
    int64_t q_shape[4] = {1, 1, H, DC + DR}, o_shape[4] = {1, 1, H, DV};
    gqla_status st;
    int i, h, d, t, bad = 0;

    /* Deterministic but non-trivial values (no zeros). */
    for (i = 0; i < G * (DC + DV) * R; ++i) w[i] = (float)sin(0.37 * i + 0.1);
    for (i = 0; i < R; ++i) c[i] = (float)cos(0.71 * i + 0.2);
    for (i = 0; i < DR; ++i) kr[i] = 0.5f + (float)i;
    for (i = 0; i < H * (DC + DR); ++i) q[i] = (float)sin(1.3 * i + 0.3);
    for (i = 0; i < H * DV; ++i) o[i] = NAN;

    if ((st = gqla_config_default(&cfg, GQLA_KIND_GQLA)) != GQLA_OK) return fail("gqla_config_default", st);
    cfg.num_heads = H;
    cfg.num_kv_heads = G;
    cfg.latent_dim = R;
    cfg.nope_dim = DC;
    cfg.rope_dim = DR;
    cfg.value_dim = DV;
    cfg.num_layers = 1;
    cfg.cache_dtype = GQLA_DTYPE_F32;
    cfg.device = GQLA_DEVICE_CPU;
    cfg.max_tokens = 64;
    if ((st = gqla_session_create(&cfg, &session)) != GQLA_OK) return fail("gqla_session_create", st);

    gqla_tensor_init(&tw, w, GQLA_DTYPE_F32, 2, w_shape);
    gqla_tensor_init(&tc, c, GQLA_DTYPE_F32, 2, c_shape);
    gqla_tensor_init(&tkr, kr, GQLA_DTYPE_F32, 2, kr_shape);
    gqla_tensor_init(&tq, q, GQLA_DTYPE_F32, 4, q_shape);
    gqla_tensor_init(&to, o, GQLA_DTYPE_F32, 4, o_shape);
    if ((st = gqla_set_weights(session, 0, &tw)) != GQLA_OK) return fail("gqla_set_weights", st);
    if ((st = gqla_sequence_add(session, &seq)) != GQLA_OK) return fail("gqla_sequence_add", st);
    if ((st = gqla_append(session, 0, seq, &tc, &tkr)) != GQLA_OK) return fail("gqla_append", st);
    if ((st = gqla_decode(session, 0, 1, &seq, &tq, &to, NULL)) != GQLA_OK) return fail("gqla_decode", st);

    for (h = 0; h < H; ++h) {
        int g = h / (H / G);
        for (d = 0; d < DV; ++d) {
            double expect = 0.0;
            for (t = 0; t < R; ++t) expect += (double)w[(g * (DC + DV) + DC + d) * R + t] * c[t];
            if (!(fabs(o[h * DV + d] - expect) <= 1e-5 * (1.0 + fabs(expect)))) {
                fprintf(stderr, "o[%d][%d] = %g, expected %g\n", h, d, o[h * DV + d], expect);
                bad = 1;
            }
        }
    }
    gqla_session_destroy(session);
    if (bad) return 1;
    printf("OK (gqla %s)\n", gqla_version_string());
    return 0;
}

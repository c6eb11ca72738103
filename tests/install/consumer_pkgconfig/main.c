/* SPDX-License-Identifier: Apache-2.0 */
/* Installed-package check through pkg-config: one GQA token in, its value out. */
#include <math.h>
#include <stdio.h>

#include <gqla/gqla.h>

/* The same program is the add_subdirectory consumer (subproject/). */
#ifndef CONSUMER_NAME
#define CONSUMER_NAME "pkg-config consumer"
#endif

int main(void) {
    enum { H = 4, G = 2, D = 8 };
    float k[G * D], v[G * D], q[H * D], o[H * D];
    int64_t kv_shape[3] = {1, G, D}, q_shape[4] = {1, 1, H, D};
    gqla_config cfg;
    gqla_session* s = NULL;
    gqla_seq_id seq;
    gqla_tensor tk, tv, tq, to;
    int i, h, d;
    for (i = 0; i < G * D; ++i) k[i] = (float)sin(0.3 * i + 0.1), v[i] = (float)cos(0.7 * i + 0.2);
    for (i = 0; i < H * D; ++i) q[i] = (float)sin(1.1 * i + 0.5), o[i] = NAN;
    gqla_config_default(&cfg, GQLA_KIND_GQA);
    cfg.num_heads = H;
    cfg.num_kv_heads = G;
    cfg.head_dim = D;
    cfg.cache_dtype = GQLA_DTYPE_F32;
    cfg.device = GQLA_DEVICE_CPU;
    cfg.max_tokens = 64;
    gqla_tensor_init(&tk, k, GQLA_DTYPE_F32, 3, kv_shape);
    gqla_tensor_init(&tv, v, GQLA_DTYPE_F32, 3, kv_shape);
    gqla_tensor_init(&tq, q, GQLA_DTYPE_F32, 4, q_shape);
    gqla_tensor_init(&to, o, GQLA_DTYPE_F32, 4, q_shape);
    if (gqla_session_create(&cfg, &s) != GQLA_OK || gqla_sequence_add(s, &seq) != GQLA_OK ||
        gqla_append(s, 0, seq, &tk, &tv) != GQLA_OK || gqla_decode(s, 0, 1, &seq, &tq, &to, NULL) != GQLA_OK) {
        fprintf(stderr, "gqla call failed: %s\n", gqla_last_error_message());
        return 1;
    }
    gqla_session_destroy(s);
    for (h = 0; h < H; ++h)
        for (d = 0; d < D; ++d)
            if (!(fabs(o[h * D + d] - v[(h / (H / G)) * D + d]) <= 1e-6)) {
                fprintf(stderr, "o[%d][%d] wrong\n", h, d);
                return 1;
            }
    printf("OK %s, gqla %s\n", CONSUMER_NAME, gqla_version_string());
    return 0;
}

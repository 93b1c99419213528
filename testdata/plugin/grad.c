/* A plug-in of backward entry points alone, for `qwenref check --grad`:
 * the conv + SiLU backward, correct, and the gated RMSNorm backward with
 * one deliberate bug (the mean term of the norm's gradient left out), so
 * check --grad passes a conv gradient file and fails a gated-rmsnorm one
 * at dx. Plain loops, float accumulation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "qwenref_plugin.h"

int qwenref_plugin_abi(void) { return QWENREF_PLUGIN_ABI; }

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

int qwenref_conv_backward(float *dx, float *dw, float *dbias, float *dstate,
                          const float *x, const float *w, const float *bias, const float *state,
                          const float *dy, const float *dfinal, int T, int C, int K,
                          char *err, int errlen) {
    size_t n = (size_t)(K + T) * C;
    float *xs = malloc(n * sizeof(float)), *dxs = calloc(n, sizeof(float));
    if (!xs || !dxs) {
        free(xs);
        free(dxs);
        snprintf(err, errlen, "out of memory for T=%d C=%d K=%d", T, C, K);
        return 1;
    }
    memcpy(xs, state, (size_t)K * C * sizeof(float));
    memcpy(xs + (size_t)K * C, x, (size_t)T * C * sizeof(float));
    for (size_t i = 0; i < (size_t)K * C; i++)
        dxs[(size_t)T * C + i] = dfinal[i]; /* the final state is xs's last K rows */
    memset(dw, 0, (size_t)C * K * sizeof(float));
    if (dbias)
        memset(dbias, 0, (size_t)C * sizeof(float));
    for (int t = 0; t < T; t++) {
        for (int c = 0; c < C; c++) {
            float u = bias ? bias[c] : 0.0f;
            for (int j = 0; j < K; j++)
                u += w[c * K + j] * xs[(size_t)(t + 1 + j) * C + c];
            float s = sigmoidf(u);
            float du = dy[(size_t)t * C + c] * s * (1.0f + u * (1.0f - s));
            if (dbias)
                dbias[c] += du;
            for (int j = 0; j < K; j++) {
                size_t r = (size_t)(t + 1 + j) * C + c;
                dw[c * K + j] += xs[r] * du;
                dxs[r] += w[c * K + j] * du;
            }
        }
    }
    memcpy(dstate, dxs, (size_t)K * C * sizeof(float));
    memcpy(dx, dxs + (size_t)K * C, (size_t)T * C * sizeof(float));
    free(xs);
    free(dxs);
    return 0;
}

int qwenref_gated_rmsnorm_backward(float *dx, float *dz, float *dw,
                                   const float *x, const float *z, const float *w, const float *dy,
                                   int rows, int dim, float eps, char *err, int errlen) {
    (void)err;
    (void)errlen;
    memset(dw, 0, (size_t)dim * sizeof(float));
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * dim, *zr = z + (size_t)r * dim, *dyr = dy + (size_t)r * dim;
        float ss = 0.0f;
        for (int i = 0; i < dim; i++)
            ss += xr[i] * xr[i];
        float inv = 1.0f / sqrtf(ss / dim + eps);
        for (int i = 0; i < dim; i++) {
            float s = sigmoidf(zr[i]), n = xr[i] * inv;
            dz[(size_t)r * dim + i] = dyr[i] * n * w[i] * s * (1.0f + zr[i] * (1.0f - s));
            dw[i] += dyr[i] * n * zr[i] * s;
            /* BUG: dx = inv * (dn - n * mean(dn * n)); the mean term is missing. */
            dx[(size_t)r * dim + i] = inv * dyr[i] * w[i] * zr[i] * s;
        }
    }
    return 0;
}

/* A correct qwenref kernel plug-in: plain loops for every op of
 * plugin/qwenref_plugin.h. The tests build it with
 *   gcc -O2 -shared -fPIC -I plugin -o good.so testdata/plugin/good.c -lm
 * and run it through `qwenref check` and `qwenref trace`. wrong.c builds
 * the same file with one deliberate bug. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qwenref_plugin.h"

int qwenref_plugin_abi(void) { return QWENREF_PLUGIN_ABI; }

int qwenref_gdn_core(float *out, const float *q, const float *k, const float *v,
                     const float *g, const float *beta,
                     int T, int NK, int NV, int DK, int DV,
                     float *state, char *err, int errlen) {
    if (NK <= 0 || NV % NK != 0) {
        snprintf(err, errlen, "NV=%d is not a multiple of NK=%d", NV, NK);
        return 1;
    }
    float *u = malloc(sizeof(float) * (size_t)DV);
    if (u == NULL) {
        snprintf(err, errlen, "out of memory");
        return 2;
    }
    int group = NV / NK;
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < NV; h++) {
            float *S = state + (size_t)h * DK * DV;
            const float *qt = q + ((size_t)t * NK + h / group) * DK;
            const float *kt = k + ((size_t)t * NK + h / group) * DK;
            const float *vt = v + ((size_t)t * NV + h) * DV;
            float a = expf(g[(size_t)t * NV + h]), b = beta[(size_t)t * NV + h];
#ifndef WRONG_DECAY
            for (int i = 0; i < DK * DV; i++) S[i] *= a; /* decay first */
#endif
            for (int j = 0; j < DV; j++) {
                float pred = 0;
                for (int i = 0; i < DK; i++) pred += S[i * DV + j] * kt[i];
                u[j] = b * (vt[j] - pred);
            }
#ifdef WRONG_DECAY
            for (int i = 0; i < DK * DV; i++) S[i] *= a; /* the bug: decays after predicting */
#endif
            for (int i = 0; i < DK; i++)
                for (int j = 0; j < DV; j++) S[i * DV + j] += kt[i] * u[j];
            float *ot = out + ((size_t)t * NV + h) * DV;
            for (int j = 0; j < DV; j++) {
                float o = 0;
                for (int i = 0; i < DK; i++) o += S[i * DV + j] * qt[i];
                ot[j] = o;
            }
        }
    }
    free(u);
    return 0;
}

int qwenref_conv(float *y, const float *x, int T, int C, const float *w, int K,
                 float *state, char *err, int errlen) {
    /* xs = [state; x], K + T rows of C. */
    float *xs = malloc(sizeof(float) * (size_t)(K + T) * C);
    if (xs == NULL) {
        snprintf(err, errlen, "out of memory for %d x %d", K + T, C);
        return 2;
    }
    memcpy(xs, state, sizeof(float) * (size_t)K * C);
    memcpy(xs + (size_t)K * C, x, sizeof(float) * (size_t)T * C);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            float s = 0;
            for (int j = 0; j < K; j++) s += w[(size_t)c * K + j] * xs[(size_t)(t + 1 + j) * C + c];
            y[(size_t)t * C + c] = s / (1 + expf(-s));
        }
    memcpy(state, xs + (size_t)T * C, sizeof(float) * (size_t)K * C);
    free(xs);
    return 0;
}

int qwenref_attention(float *out, const float *q, const float *k, const float *v,
                      int T, int S, int NH, int NKV, int D, float scale,
                      char *err, int errlen) {
    float *p = malloc(sizeof(float) * (size_t)S);
    if (p == NULL) {
        snprintf(err, errlen, "out of memory for %d scores", S);
        return 2;
    }
    int group = NH / NKV;
    for (int i = 0; i < T; i++) {
        int last = S - T + i;
        for (int h = 0; h < NH; h++) {
            const float *qi = q + ((size_t)i * NH + h) * D;
            float m = -INFINITY, sum = 0;
            for (int j = 0; j <= last; j++) {
                const float *kj = k + ((size_t)j * NKV + h / group) * D;
                float s = 0;
                for (int d = 0; d < D; d++) s += qi[d] * kj[d];
                p[j] = s * scale;
                if (p[j] > m) m = p[j];
            }
            for (int j = 0; j <= last; j++) {
                p[j] = expf(p[j] - m);
                sum += p[j];
            }
            float *oi = out + ((size_t)i * NH + h) * D;
            for (int d = 0; d < D; d++) oi[d] = 0;
            for (int j = 0; j <= last; j++) {
                const float *vj = v + ((size_t)j * NKV + h / group) * D;
                for (int d = 0; d < D; d++) oi[d] += p[j] / sum * vj[d];
            }
        }
    }
    free(p);
    return 0;
}

int qwenref_matmul(float *y, const float *x, int M, int K, int N, const float *w,
                   char *err, int errlen) {
    (void)err;
    (void)errlen;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float s = 0;
            for (int kk = 0; kk < K; kk++) s += x[(size_t)m * K + kk] * w[(size_t)n * K + kk];
            y[(size_t)m * N + n] = s;
        }
    return 0;
}

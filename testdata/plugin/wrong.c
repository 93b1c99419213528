/* A deliberately wrong plug-in: good.c with the decay of the gated delta
 * rule applied after the prediction S^T k instead of before it, a bug that
 * only shows where the decay differs from 1. Every other op is correct, so
 * `qwenref trace --compare` must name core_out as the first failing stage. */
#define WRONG_DECAY 1
#include "good.c"

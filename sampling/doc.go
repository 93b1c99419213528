// Package sampling chooses the next token as transformers 5.17's generate
// does: the logits processors GenerationMixin._get_logits_processor builds
// from a generation config (repetition penalty, then, when sampling,
// temperature, top-h, top-k, top-p, min-p, typical, epsilon and eta), in
// that order and with their arithmetic, then the argmax (greedy) or a
// seeded draw from the softmax of the scores that survive.
//
// No processor sorts the vocabulary: the first warper that drops tokens
// finds its survivors by a partial selection over the logits, and the
// warpers after it work on those alone, so that sampling costs about what
// the argmax of greedy decoding costs. FromGenerationConfig reads
// generation_config.json and reports every key it does not apply.
// docs/sampling.md describes the rules and their checks.
package sampling

// Package generate is the application on top of the model: generation
// (Generate, with generation_config.json's sampling), conversations that
// keep their caches across turns (Conversation), streaming text, the
// checkpoint's tokenizer, token-id parsing and perplexity. It runs the
// model through model's Runner and Session; model knows nothing of it.
package generate

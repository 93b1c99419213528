package tokenizer_test

import (
	"fmt"

	"github.com/qwenref/qwenref/tokenizer"
)

// The ids below are HF tokenizers' (case special_chat of expected.json).
func ExampleTokenizer_Encode() {
	tok, err := tokenizer.Load("../testdata/tokenizer/qwen3-tokenizer.json.gz")
	if err != nil {
		panic(err)
	}
	ids, err := tok.Encode("<|im_start|>user\nhi<|im_end|>")
	if err != nil {
		panic(err)
	}
	fmt.Println(ids)
	back, err := tok.Decode(ids)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%q\n", back)
	// Output:
	// [151644 872 198 6023 151645]
	// "<|im_start|>user\nhi<|im_end|>"
}

func ExampleTokenizer_SpecialTokens() {
	tok, err := tokenizer.Load("../testdata/tokenizer/qwen3-tokenizer.json.gz")
	if err != nil {
		panic(err)
	}
	for _, a := range tok.SpecialTokens()[:3] {
		fmt.Println(a.ID, a.Content)
	}
	// Output:
	// 151643 <|endoftext|>
	// 151644 <|im_start|>
	// 151645 <|im_end|>
}

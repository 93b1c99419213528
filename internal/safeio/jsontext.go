package safeio

import (
	"fmt"
	"unicode/utf8"
)

// CheckJSONText refuses what a strict reader of JSON text (Python's
// json.loads on a str, HF's serde_json) refuses and Go's decoder would
// quietly turn into U+FFFD: invalid UTF-8, and \uD800–\uDFFF escapes in a
// string that are not a high-low pair. Read leniently, two distinct keys
// could become one.
func CheckJSONText(data []byte) error {
	if i := InvalidUTF8At(data); i >= 0 {
		return fmt.Errorf("invalid UTF-8 at byte %d", i)
	}
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 < len(data) && data[i+1] == 'u' {
				r, ok := hex4(data, i+2)
				switch {
				case ok && r >= 0xd800 && r < 0xdc00:
					lo, ok2 := rune(0), false
					if i+7 < len(data) && data[i+6] == '\\' && data[i+7] == 'u' {
						lo, ok2 = hex4(data, i+8)
					}
					if !ok2 || lo < 0xdc00 || lo >= 0xe000 {
						return fmt.Errorf("a lone surrogate \\u%04x in a string at byte %d", r, i)
					}
					i += 11 // the pair; the loop steps past its last digit
					continue
				case ok && r >= 0xdc00 && r < 0xe000:
					return fmt.Errorf("a lone surrogate \\u%04x in a string at byte %d", r, i)
				}
			}
			i++ // the escaped character
		}
	}
	return nil
}

// InvalidUTF8At is the offset of the first byte of data that is not
// valid UTF-8, or -1.
func InvalidUTF8At(data []byte) int {
	if utf8.Valid(data) {
		return -1
	}
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

// hex4 reads the four hex digits at data[i:].
func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

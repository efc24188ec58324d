package llm

import "unicode/utf8"

func decodeRune(s string) (rune, int) { return utf8.DecodeRuneInString(s) }

// AppendJSONString appends s to b as a JSON string literal. It is exported
// for the protocol faces, which hand-encode hot frames.
func AppendJSONString(b []byte, s string) []byte { return appendString(b, s) }

package piserver

// idChars reports whether s is not empty and every byte is an ASCII
// letter, digit, _, . or - (or, with colon, :): pi-server's rules
// ^[a-zA-Z0-9_.-]+$ for session ids and ^[a-zA-Z0-9:_.-]+$ for request
// ids, as a loop, so that nothing is compiled at start for them.
func idChars(s string, colon bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' || (colon && c == ':')
		if !ok {
			return false
		}
	}
	return s != ""
}

package web

import (
	"encoding/base64"
	"testing"
)

// TestMQTTPreview: a payload's preview is text when it is UTF-8, a rune cut
// by the bound left out; base64 otherwise.
func TestMQTTPreview(t *testing.T) {
	bin := []byte{0xff, 0x00, 0x41}
	for _, c := range []struct {
		preview       []byte
		size          int
		text, enc     string
		truncatedWant bool
	}{
		{[]byte("hello"), 5, "hello", "string", false},
		{[]byte("hel"), 5, "hel", "string", true},
		{[]byte("é")[:1], 2, "", "string", true},   // the first byte of "é"
		{[]byte("aé")[:2], 3, "a", "string", true}, // "a" and half an "é"
		{[]byte("a€")[:3], 4, "a", "string", true}, // "a" and two thirds of "€"
		{[]byte("é")[1:], 1, base64.StdEncoding.EncodeToString([]byte("é")[1:]), "base64", false},
		{bin, 3, base64.StdEncoding.EncodeToString(bin), "base64", false},
		{nil, 0, "", "string", false},
	} {
		text, enc, trunc := previewJSON(c.preview, c.size)
		if text != c.text || enc != c.enc || trunc != c.truncatedWant {
			t.Errorf("preview %q of %d: %q %s %v, want %q %s %v", c.preview, c.size, text, enc, trunc, c.text, c.enc, c.truncatedWant)
		}
	}
}

package mqtt

import (
	"bufio"
	"bytes"
	"testing"
)

func TestPacketBuffered(t *testing.T) {
	big := append([]byte{0x30, 0x80, 0x01}, make([]byte, 128)...) // remaining length 128 in two bytes
	tests := []struct {
		name string
		in   []byte
		want bool
	}{
		{"empty", nil, false},
		{"type only", []byte{0x30}, false},
		{"zero length", []byte{0xc0, 0x00}, true},
		{"whole", []byte{0x30, 0x03, 0, 1, 'a'}, true},
		{"short body", []byte{0x30, 0x03, 0, 1}, false},
		{"two-byte length", big, true},
		{"two-byte length, short", big[:len(big)-1], false},
		{"length cut", []byte{0x30, 0x80}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReader(bytes.NewReader(tt.in))
			_, _ = br.Peek(len(tt.in)) // fill the buffer
			if got := packetBuffered(br); got != tt.want {
				t.Fatalf("packetBuffered = %v, want %v", got, tt.want)
			}
		})
	}
}

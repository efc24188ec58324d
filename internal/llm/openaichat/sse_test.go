package openaichat

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

func TestSSEReader(t *testing.T) {
	long := strings.Repeat("x", 40<<10) // longer than the reader's buffer
	tests := []struct {
		name string
		in   string
		want []string // "event|data"
	}{
		{"data-only events", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []string{`|{"a":1}`, "|[DONE]"}},
		{"no space after the colon", "data:x\n\n", []string{"|x"}},
		{"CRLF", "data: a\r\n\r\ndata: b\r\n\r\n", []string{"|a", "|b"}},
		{"comments and empty lines", ": OPENROUTER PROCESSING\n\n\n: ping\ndata: a\n\n", []string{"|a"}},
		{"several data lines", "data: a\ndata: b\n\n", []string{"|a\nb"}},
		{"event names", "event: error\ndata: {}\n\ndata: after\n\n", []string{"error|{}", "|after"}},
		{"a name without data is forgotten", "event: ping\n\ndata: x\n\n", []string{"|x"}},
		{"unknown fields", "id: 7\nretry: 100\ndata: x\n\n", []string{"|x"}},
		{"an empty data line", "data:\n\n", []string{"|"}},
		{"last event without its blank line", "data: a\n\ndata: [DONE]\n", []string{"|a", "|[DONE]"}},
		{"last line without its line end", "data: a\n\ndata: [DONE]", []string{"|a", "|[DONE]"}},
		{"a long line", "data: " + long + "\n\ndata: b\n\n", []string{"|" + long, "|b"}},
		{"empty stream", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One byte at a time, so every line end falls between reads.
			r := newSSEReader(iotest.OneByteReader(strings.NewReader(tt.in)))
			var got []string
			for {
				ev, data, err := r.next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, string(ev)+"|"+string(data))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSSEReaderError(t *testing.T) {
	boom := errors.New("boom")
	r := newSSEReader(io.MultiReader(strings.NewReader("data: a\n\ndata: half"), iotest.ErrReader(boom)))
	if _, data, err := r.next(); err != nil || string(data) != "a" {
		t.Fatalf("first event %q %v", data, err)
	}
	// A failed read never passes on the half event before it.
	if _, data, err := r.next(); !errors.Is(err, boom) {
		t.Fatalf("got %q %v, want the read error", data, err)
	}
}

package server

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// brokenBody gives parts, then err.
type brokenBody struct {
	parts []string
	err   error
}

func (b *brokenBody) Read(p []byte) (int, error) {
	if len(b.parts) == 0 {
		return 0, b.err
	}
	n := copy(p, b.parts[0])
	b.parts[0] = b.parts[0][n:]
	if b.parts[0] == "" {
		b.parts = b.parts[1:]
	}
	return n, nil
}

func (b *brokenBody) Close() error { return nil }

// A stream passed on goes out by whole events; one the owner ends goes
// out as it is, one that breaks ends after its last whole event with
// the reason.
func TestSSECut(t *testing.T) {
	const reason = ": the node running session s stopped; reconnect and resume with Last-Event-ID\n\n"
	tests := []struct {
		name  string
		parts []string
		err   error
		want  string
	}{
		{"ended by the owner", []string{"id: 1\ndata: {}\n\n", "id: 2\nda"}, io.EOF, "id: 1\ndata: {}\n\nid: 2\nda"},
		{"broken mid-event", []string{"id: 1\ndata: {}\n\nid: 2\n", "data: {\"a\""}, errors.New("unexpected EOF"), "id: 1\ndata: {}\n\n" + reason},
		{"broken between events", []string{"id: 1\r\ndata: {}\r\n\r\n"}, errors.New("reset"), "id: 1\r\ndata: {}\r\n\r\n" + reason},
		{"broken at once", nil, errors.New("reset"), reason},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := io.ReadAll(&sseCut{body: &brokenBody{parts: tc.parts, err: tc.err}, id: "s"})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if strings.Count(string(got), reason) > 1 {
				t.Errorf("the reason came twice")
			}
		})
	}
}

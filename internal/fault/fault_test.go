package fault

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestErrorf(t *testing.T) {
	e := Errorf(NotFound, "session %s: %w", "s1", io.EOF)
	if e.Message != "session s1: EOF" || e.Code != NotFound {
		t.Fatalf("got %+v", e)
	}
	if !errors.Is(e, io.EOF) {
		t.Fatal("the %w operand should be the cause")
	}
}

func TestCodeOfAndPublic(t *testing.T) {
	sentinel := New(Busy, "busy now")
	wrapped := fmt.Errorf("prompt: %w", sentinel)
	tests := []struct {
		name    string
		err     error
		code    Code
		message string
	}{
		{"nil", nil, "", ""},
		{"fault", sentinel, Busy, "busy now"},
		{"wrapped fault", wrapped, Busy, "busy now"},
		{"plain", errors.New("disk on fire"), Internal, "Internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CodeOf(tt.err); got != tt.code {
				t.Errorf("CodeOf = %q, want %q", got, tt.code)
			}
			p := Public(tt.err)
			if tt.err == nil {
				if p != nil {
					t.Errorf("Public(nil) = %v", p)
				}
				return
			}
			if p.Code != tt.code || p.Message != tt.message {
				t.Errorf("Public = %+v", p)
			}
		})
	}
	if !errors.Is(wrapped, New(Busy, "busy now")) {
		t.Error("errors.Is should match an equal fault")
	}
	if errors.Is(wrapped, New(Busy, "other")) {
		t.Error("errors.Is should not match another message")
	}
}

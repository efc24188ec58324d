package piwire

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestLineReader(t *testing.T) {
	in := "a\r\nb\u2028c\n\n" + strings.Repeat("x", 40) + "\nshort\nlast-without-newline"
	lr := NewLineReader(strings.NewReader(in), 20)
	var got []string
	for {
		line, err := lr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, ErrLineTooLong) {
			got = append(got, "<too long>")
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(line))
	}
	want := []string{"a", "b\u2028c", "", "<too long>", "short", "last-without-newline"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func TestLineReaderHugeLineDoesNotBuffer(t *testing.T) {
	// A 50 MB line against a 1 KB limit is skipped without holding it.
	r := io.MultiReader(strings.NewReader(strings.Repeat("y", 50<<20)), strings.NewReader("\nok\n"))
	lr := NewLineReader(r, 1024)
	if _, err := lr.Next(); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("first: %v", err)
	}
	if cap(lr.buf) > 1<<20 {
		t.Fatalf("buffered %d bytes of an over-size line", cap(lr.buf))
	}
	line, err := lr.Next()
	if err != nil || string(line) != "ok" {
		t.Fatalf("after the long line: %q %v", line, err)
	}
}

package llm

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

// readAll reads every event of in, one byte at a time so that every line
// end falls between reads, as "name|data" or "keep-alive".
func readAll(t *testing.T, in string, keepAlives bool) []string {
	t.Helper()
	r := NewSSEReader(iotest.OneByteReader(strings.NewReader(in)))
	r.KeepAlives = keepAlives
	var got []string
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.KeepAlive {
			got = append(got, "keep-alive")
			continue
		}
		got = append(got, string(ev.Name)+"|"+string(ev.Data))
	}
}

func TestSSEReader(t *testing.T) {
	long := strings.Repeat("x", 40<<10) // longer than the reader's buffer
	tests := []struct {
		name       string
		in         string
		keepAlives bool
		want       []string // "event|data"
	}{
		{"data-only events", "data: {\"a\":1}\n\ndata: [DONE]\n\n", false, []string{`|{"a":1}`, "|[DONE]"}},
		{"no space after the colon", "data:x\n\n", false, []string{"|x"}},
		{"only one space is dropped", "data:  x\n\n", false, []string{"| x"}},
		{"CRLF", "data: a\r\n\r\ndata: b\r\n\r\n", false, []string{"|a", "|b"}},
		{"comments and empty lines", ": OPENROUTER PROCESSING\n\n\n: ping\ndata: a\n\n", false, []string{"|a"}},
		{"comments as keep-alives", ": OPENROUTER PROCESSING\n\ndata: a\n: inside\ndata: b\n\n", true, []string{"keep-alive", "|a\nb"}},
		{"a comment after a name is no keep-alive", "event: x\n: c\ndata: a\n\n", true, []string{"x|a"}},
		{"several data lines", "data: a\ndata: b\n\n", false, []string{"|a\nb"}},
		{"event names", "event: error\ndata: {}\n\ndata: after\n\n", false, []string{"error|{}", "|after"}},
		{"the last name counts", "event: a\nevent: b\ndata: x\n\n", false, []string{"b|x"}},
		{"a name without data is forgotten", "event: ping\n\ndata: x\n\n", false, []string{"|x"}},
		{"Anthropic's ping", "event: ping\ndata: {\"type\": \"ping\"}\n\n", false, []string{`ping|{"type": "ping"}`}},
		{"unknown fields", "id: 7\nretry: 100\ndata: x\n\n", false, []string{"|x"}},
		{"a field without a colon", "data\n\n", false, []string{"|"}},
		{"an empty data line", "data:\n\n", false, []string{"|"}},
		{"last event without its blank line", "data: a\n\ndata: [DONE]\n", false, []string{"|a", "|[DONE]"}},
		{"last line without its line end", "data: a\n\ndata: [DONE]", false, []string{"|a", "|[DONE]"}},
		{"a long line", "data: " + long + "\n\ndata: b\n\n", false, []string{"|" + long, "|b"}},
		{"empty stream", "", false, nil},
		{"only blank lines", "\n\r\n\n", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, readAll(t, tt.in, tt.keepAlives)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSSEReaderError(t *testing.T) {
	boom := errors.New("boom")
	r := NewSSEReader(io.MultiReader(strings.NewReader("data: a\n\ndata: half"), iotest.ErrReader(boom)))
	if ev, err := r.Next(); err != nil || string(ev.Data) != "a" {
		t.Fatalf("first event %q %v", ev.Data, err)
	}
	// A failed read never passes on the half event before it.
	if ev, err := r.Next(); !errors.Is(err, boom) {
		t.Fatalf("got %q %v, want the read error", ev.Data, err)
	}
}

func TestSSEReaderLimit(t *testing.T) {
	tests := []struct {
		name string
		in   io.Reader
	}{
		{"one endless line", io.MultiReader(strings.NewReader("data: "), repeatReader('x', MaxSSEEvent+1))},
		{"many data lines", repeatLines("data: "+strings.Repeat("y", 1<<20)+"\n", 33)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewSSEReader(tt.in).Next()
			if err == nil || errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "bytes") {
				t.Fatalf("err %v, want the size limit", err)
			}
		})
	}
}

func repeatReader(c byte, n int) io.Reader {
	return io.LimitReader(bytesRepeat{c}, int64(n))
}

type bytesRepeat struct{ c byte }

func (b bytesRepeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = b.c
	}
	return len(p), nil
}

func repeatLines(line string, n int) io.Reader {
	return strings.NewReader(strings.Repeat(line, n))
}

// FuzzSSEReader splits arbitrary bytes from a server. Whatever they are,
// the reader ends (never loops or panics), keeps every event within the
// limit, and agrees with a plain reference splitter on what the events
// are, whether the bytes arrive at once or one at a time.
func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{
		"data: {\"a\":1}\n\ndata: [DONE]\n\n",
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n\n",
		": OPENROUTER PROCESSING\n\ndata: x\r\n\r\n",
		"event: ping\n\ndata:\n\ndata\n\n",
		"data: a\ndata: b\n\ndata: [DONE]",
		"id: 1\nretry: 5\n:\n\n\r\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, keepAlives bool) {
		want := referenceSplit(in, keepAlives)
		for _, oneByte := range []bool{false, true} {
			var src io.Reader = bytes.NewReader(in)
			if oneByte {
				src = iotest.OneByteReader(src)
			}
			r := NewSSEReader(src)
			r.KeepAlives = keepAlives
			var got []string
			for i := 0; ; i++ {
				if i > len(in)+1 {
					t.Fatalf("more events than bytes")
				}
				ev, err := r.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if ev.KeepAlive {
					got = append(got, "keep-alive")
				} else {
					got = append(got, string(ev.Name)+"|"+string(ev.Data))
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("one byte at a time %v: events (-reference +reader):\n%s", oneByte, diff)
			}
		}
	})
}

// referenceSplit is the event-stream grammar written as plainly as
// possible, on the whole input at once, for FuzzSSEReader to compare with.
func referenceSplit(in []byte, keepAlives bool) []string {
	var out []string
	s := string(in)
	var lines []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			lines = append(lines, s)
			break
		}
		lines = append(lines, s[:i])
		s = s[i+1:]
	}
	name, data, hasData := "", []string(nil), false
	for _, l := range lines {
		l = strings.TrimSuffix(l, "\r")
		switch {
		case l == "":
			if hasData {
				out = append(out, name+"|"+strings.Join(data, "\n"))
			}
			name, data, hasData = "", nil, false
		case l[0] == ':':
			if keepAlives && !hasData && name == "" {
				out = append(out, "keep-alive")
			}
		default:
			field, value, _ := strings.Cut(l, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "data":
				data, hasData = append(data, value), true
			case "event":
				name = value
			}
		}
	}
	if hasData {
		out = append(out, name+"|"+strings.Join(data, "\n"))
	}
	return out
}

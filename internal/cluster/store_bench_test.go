package cluster

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// BenchmarkTranscriptAppend is one message appended to a session file
// (about 1 KiB, fsync'd as the default policy does), without and with the
// cluster's mirror, and the mirror's write alone: what the cluster adds to
// every transcript append.
func BenchmarkTranscriptAppend(b *testing.B) {
	owner, _ := benchNodes(b)
	ctx := b.Context()
	l, err := owner.Acquire(ctx, "s1")
	if err != nil {
		b.Fatal(err)
	}
	msg := &llm.Message{Role: llm.RoleToolResult, ToolCallID: "c", ToolName: "bash",
		Content: []llm.Content{llm.Text(strings.Repeat("output line\n", 80))}}
	for _, bc := range []struct {
		name string
		opts []transcript.Option
	}{
		{"local", nil},
		{"mirrored", []transcript.Option{transcript.WithMirror(l.TranscriptMirror())}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f, err := transcript.CreateAt(filepath.Join(b.TempDir(), "s.jsonl"), "/p", bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			start := time.Now()
			for b.Loop() {
				if _, err := f.AppendMessage(msg); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/append")
		})
	}
	b.Run("mirror-only", func(b *testing.B) {
		line, _ := json.Marshal(msg)
		line = append(line, '\n')
		mirror := l.TranscriptMirror()
		start := time.Now()
		for b.Loop() {
			if err := mirror(line); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/append")
	})
}

// BenchmarkJournalAppend is one finished command's record in the session's
// journal subject: the durable write a command of a clustered session pays
// twice (begun, finished).
func BenchmarkJournalAppend(b *testing.B) {
	owner, _ := benchNodes(b)
	if _, err := owner.Acquire(b.Context(), "s1"); err != nil {
		b.Fatal(err)
	}
	j := owner.Journal()
	now := time.Now()
	i := 0
	start := time.Now()
	for b.Loop() {
		i++
		id := "c" + strconv.Itoa(i)
		err := j.Append(pipeline.Record{Op: pipeline.OpFinish, Command: "set_name", ID: id, Scope: "session:s1", Fingerprint: "f",
			Response: &pipeline.Response{ID: id, Command: "set_name", Success: true}, At: now, Expires: now.Add(time.Hour)})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/append")
}

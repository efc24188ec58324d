package cluster

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// These tests share cluster_test.go's real embedded NATS server and short
// lease TTLs (synctest cannot drive NATS's network I/O).

func userMsg(text string) *llm.Message {
	return &llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text(text)}, Timestamp: 1700000000000}
}

func assistantCalls(calls ...llm.Content) *llm.Message {
	return &llm.Message{Role: llm.RoleAssistant, API: llm.APIAnthropicMessages, Provider: "anthropic", Model: "claude-x",
		StopReason: llm.StopToolUse, Timestamp: 1700000000001, Content: calls}
}

func toolResult(id, text string) *llm.Message {
	return &llm.Message{Role: llm.RoleToolResult, ToolCallID: id, ToolName: "bash",
		Content: []llm.Content{llm.Text(text)}, Timestamp: 1700000000002}
}

// takeover waits until b can take id over from a, which stops renewing:
// the path a crashed owner's sessions take.
func takeover(ctx context.Context, t *testing.T, a, b *Node, id string) *Lease {
	t.Helper()
	a.renewPaused.Store(true)
	deadline := time.Now().Add(10 * testTTL)
	for {
		lb, err := b.Takeover(ctx, id)
		if err == nil {
			return lb
		}
		var held *HeldError
		if !errors.As(err, &held) || time.Now().After(deadline) {
			t.Fatalf("Takeover: %v", err)
		}
		time.Sleep(testTTL / 10)
	}
}

// encodeEntries is a file's entries as pi-format lines, for comparing two
// files' trees.
func encodeEntries(t *testing.T, f *transcript.File) []string {
	t.Helper()
	var out []string
	for _, e := range f.Entries() {
		b, err := e.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

func TestTranscriptTakeoverRestoresFile(t *testing.T) {
	ns := nodes(t, "a", "b", "c")
	a, b, c := ns[0], ns[1], ns[2]
	ctx := ctxT(t)

	la := acquire(ctx, t, a, "s1")
	pathA := filepath.Join(t.TempDir(), "a", "s1.jsonl")
	fa, err := transcript.CreateAt(pathA, "/work/project", transcript.WithMirror(la.TranscriptMirror()))
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	// A tool output larger than a message goes as several parts.
	big := strings.Repeat("0123456789abcdef\n", 3*MaxStateMsg/17)
	for _, m := range []*llm.Message{
		userMsg("list the files"),
		assistantCalls(llm.ToolCall("call_1", "bash", []byte(`{"command":"ls"}`))),
		toolResult("call_1", big),
		userMsg("now delete them"),
		// The run stops here waiting for approval: the call has no result.
		assistantCalls(llm.ToolCall("call_2", "bash", []byte(`{"command":"rm -rf build"}`))),
	} {
		if _, err := fa.AppendMessage(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fa.AppendSessionInfo("cleanup"); err != nil {
		t.Fatal(err)
	}
	wantBytes, err := os.ReadFile(pathA)
	if err != nil {
		t.Fatal(err)
	}

	lb := takeover(ctx, t, a, b, "s1")
	pathB := filepath.Join(t.TempDir(), "b", "s1.jsonl")
	found, err := b.RestoreTranscript(ctx, "s1", pathB)
	if err != nil || !found {
		t.Fatalf("RestoreTranscript: found %v, %v", found, err)
	}
	got, err := os.ReadFile(pathB)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, wantBytes) {
		t.Fatalf("restored file differs: %d bytes, want %d", len(got), len(wantBytes))
	}
	fb, err := transcript.Open(pathB, transcript.WithStrict(), transcript.WithMirror(lb.TranscriptMirror()))
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	if g, w := strings.Join(encodeEntries(t, fb), "\n"), strings.Join(encodeEntries(t, fa), "\n"); g != w {
		t.Fatalf("restored entries differ:\n%.500s\nwant\n%.500s", g, w)
	}
	if fb.Name() != "cleanup" || fb.Leaf() != fa.Leaf() {
		t.Fatalf("restored name %q leaf %s, want cleanup and %s", fb.Name(), fb.Leaf(), fa.Leaf())
	}
	// The pending approval is the conversation's unanswered call, which a
	// session reparks when it opens the file (session.reparkLocked): a
	// session opened from the restored file has it pending again, under
	// the same id.
	sess, err := session.New(session.Config{Cwd: t.TempDir(), Open: pathB,
		Model: &llm.Model{ID: "m", API: llm.APIAnthropicMessages, Provider: "anthropic"},
		Stream: func(context.Context, *llm.Model, *llm.Context, *llm.StreamOptions) *llm.Stream {
			panic("no model call expected")
		}})
	if err != nil {
		t.Fatal(err)
	}
	pending := sess.Interactions()
	sess.Close()
	if len(pending) != 1 || pending[0].ID != interaction.ApprovalID("call_2") {
		t.Fatalf("pending interactions of the restored session: %+v, want the approval of call_2", pending)
	}

	// The old owner's next append is refused (its time ran out; the
	// stream's own refusal is TestTranscriptStreamFencesStaleOwner), and
	// the file on its disk is not touched.
	var stale *StaleError
	if _, err := fa.AppendMessage(toolResult("call_2", "stale run")); !errors.As(err, &stale) {
		t.Fatalf("stale owner's append: %v, want StaleError", err)
	}
	if !errors.As(la.Err(), &stale) {
		t.Fatalf("stale lease still live: %v", la.Err())
	}
	if after, _ := os.ReadFile(pathA); !bytes.Equal(after, wantBytes) {
		t.Fatal("the refused append changed the old owner's file")
	}

	// The new owner continues after what it read; a third node restores
	// the whole of it.
	if _, err := fb.AppendMessage(toolResult("call_2", "removed")); err != nil {
		t.Fatal(err)
	}
	// transcript sends a file it opened whole with its first append; the
	// stream already had it, so only the new entry was stored.
	last, err := b.st.state.GetLastMsgForSubject(ctx, txPrefix+"s1")
	if err != nil {
		t.Fatal(err)
	}
	if last.Header.Get(hdrKind) != "" || bytes.Count(last.Data, []byte("\n")) != 1 {
		t.Fatalf("the new owner's first append stored %d lines (kind %q), want the one new entry",
			bytes.Count(last.Data, []byte("\n")), last.Header.Get(hdrKind))
	}
	if _, err := fb.AppendMessage(userMsg("thanks")); err != nil {
		t.Fatal(err)
	}
	wantB, _ := os.ReadFile(pathB)
	pathC := filepath.Join(t.TempDir(), "s1.jsonl")
	if found, err := c.RestoreTranscript(ctx, "s1", pathC); err != nil || !found {
		t.Fatalf("RestoreTranscript on c: found %v, %v", found, err)
	}
	if gotC, _ := os.ReadFile(pathC); !bytes.Equal(gotC, wantB) {
		t.Fatalf("c restored %d bytes, want b's %d", len(gotC), len(wantB))
	}
	// Nothing is left behind but the file.
	if ents, _ := os.ReadDir(filepath.Dir(pathC)); len(ents) != 1 {
		t.Fatalf("restore left %d files, want 1", len(ents))
	}
}

// TestTranscriptStreamFencesStaleOwner: an owner that lost the session
// without noticing (its lease has not run out by its own clock) is refused
// by the stream once the new owner has read the transcript, before the new
// owner appended anything.
func TestTranscriptStreamFencesStaleOwner(t *testing.T) {
	a, b, ctx := pair(t)
	la := acquire(ctx, t, a, "s1")
	path := filepath.Join(t.TempDir(), "s1.jsonl")
	fa, err := transcript.CreateAt(path, "/p", transcript.WithMirror(la.TranscriptMirror()))
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	if _, err := fa.AppendMessage(userMsg("one")); err != nil {
		t.Fatal(err)
	}
	forceTakeover(ctx, t, a, b, "s1")
	if _, err := fa.AppendMessage(userMsg("slipped in before the restore")); err != nil {
		t.Fatalf("append before the new owner read anything: %v", err)
	}
	want, _ := os.ReadFile(path)
	out := filepath.Join(t.TempDir(), "s1.jsonl")
	if found, err := b.RestoreTranscript(ctx, "s1", out); err != nil || !found {
		t.Fatalf("RestoreTranscript: %v %v", found, err)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
		t.Fatal("the restore lost what the old owner wrote before it")
	}
	var stale *StaleError
	if _, err := fa.AppendMessage(userMsg("after the restore")); !errors.As(err, &stale) || stale.Owner != "b" {
		t.Fatalf("stale owner's append after the restore: %v, want StaleError naming b", err)
	}
	if la.Err() == nil {
		t.Fatal("the stale lease is still live")
	}
}

func TestRestoreTranscriptNotFound(t *testing.T) {
	a := nodes(t, "a")[0]
	ctx := ctxT(t)
	path := filepath.Join(t.TempDir(), "none.jsonl")
	found, err := a.RestoreTranscript(ctx, "nothing-here", path)
	if err != nil || found {
		t.Fatalf("RestoreTranscript of an unknown session: found %v, %v", found, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file was written for an unknown session: %v", err)
	}
}

// TestTranscriptIncompleteWriteLeftOut checks that a write whose parts did
// not all reach the stream (its append failed, so the owner's file does
// not have it) is not in a restored file either.
func TestTranscriptIncompleteWriteLeftOut(t *testing.T) {
	a := nodes(t, "a")[0]
	ctx := ctxT(t)
	la := acquire(ctx, t, a, "s1")
	header := `{"type":"session","version":3,"id":"x","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}` + "\n"
	mirror := la.TranscriptMirror()
	if err := mirror([]byte(header)); err != nil {
		t.Fatal(err)
	}
	// The first part of a two-part write, then nothing more of it.
	m := nats.NewMsg("")
	m.Data = []byte(`{"type":"message","id":"half"`)
	m.Header.Set(hdrPart, "1/2")
	if _, err := la.appendFenced(ctx, &la.txLog, a.st.state, txPrefix+"s1", []*nats.Msg{m}, nil); err != nil {
		t.Fatal(err)
	}
	line := `{"type":"session_info","id":"e1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","name":"n"}` + "\n"
	if err := mirror([]byte(line)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "s1.jsonl")
	if _, err := a.RestoreTranscript(ctx, "s1", path); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != header+line {
		t.Fatalf("restored:\n%s\nwant:\n%s", got, header+line)
	}
}

func TestTranscriptBadInput(t *testing.T) {
	a := nodes(t, "a")[0]
	ctx := ctxT(t)
	dir := t.TempDir()
	for _, id := range []string{"", "a.b", "a*", ">", "../etc", "has space", strings.Repeat("x", 201)} {
		if _, err := a.RestoreTranscript(ctx, id, filepath.Join(dir, "x.jsonl")); err == nil || !strings.Contains(err.Error(), "session id") {
			t.Errorf("RestoreTranscript(%q): %v, want an error naming the session id", id, err)
		}
		if _, err := a.JournalFor(ctx, id); err == nil || !strings.Contains(err.Error(), "session id") {
			t.Errorf("JournalFor(%q): %v, want an error naming the session id", id, err)
		}
	}
	if _, err := a.RestoreTranscript(ctx, "s1", ""); err == nil || !strings.Contains(err.Error(), "path") {
		t.Errorf("RestoreTranscript with no path: %v", err)
	}

	la := acquire(ctx, t, a, "s1")
	a.st.maxWrite = 3 * a.st.part // so the test need not allocate MaxTranscriptWrite
	var tooLarge *TooLargeError
	if err := la.TranscriptMirror()(make([]byte, a.st.maxWrite+1)); !errors.As(err, &tooLarge) || tooLarge.SessionID != "s1" {
		t.Fatalf("oversized write: %v, want TooLargeError", err)
	}
	if err := la.SeedTranscript(ctx, filepath.Join(dir, "missing.jsonl")); err == nil {
		t.Fatal("seeding from a missing file succeeded")
	}
	notSession := filepath.Join(dir, "not.jsonl")
	os.WriteFile(notSession, []byte("{\"type\":\"message\"}\n"), 0o600)
	if err := la.SeedTranscript(ctx, notSession); err == nil || !strings.Contains(err.Error(), "session header") {
		t.Fatalf("seeding from a file without a header: %v", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := la.TranscriptMirror()([]byte("{}\n")); !errors.Is(err, ErrReleased) {
		t.Fatalf("append after Release: %v, want ErrReleased", err)
	}
}

// TestSeedTranscript mirrors a file that existed before the cluster: a
// restore gives it back, and appends through the mirror follow it.
func TestSeedTranscript(t *testing.T) {
	a, b, ctx := pair(t)
	path := filepath.Join(t.TempDir(), "old.jsonl")
	f, err := transcript.CreateAt(path, "/p")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.AppendMessage(userMsg("from before the cluster")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	la := acquire(ctx, t, a, "old")
	if err := la.SeedTranscript(ctx, path); err != nil {
		t.Fatal(err)
	}
	f, err = transcript.Open(path, transcript.WithMirror(la.TranscriptMirror()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.AppendMessage(userMsg("in the cluster")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want, _ := os.ReadFile(path)
	out := filepath.Join(t.TempDir(), "restored.jsonl")
	if found, err := b.RestoreTranscript(ctx, "old", out); err != nil || !found {
		t.Fatalf("RestoreTranscript: %v %v", found, err)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
		t.Fatalf("restored:\n%s\nwant:\n%s", got, want)
	}
}

// TestTranscriptSwitchReplacesStream: a session that continues in another
// file (switch_session, fork, clone) sends that file whole; a restore
// gives it, and the stream keeps only it.
func TestTranscriptSwitchReplacesStream(t *testing.T) {
	a, b, ctx := pair(t)
	la := acquire(ctx, t, a, "s1")
	dir := t.TempDir()
	first, err := transcript.CreateAt(filepath.Join(dir, "first.jsonl"), "/p", transcript.WithMirror(la.TranscriptMirror()))
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"one", "two", "three"} {
		if _, err := first.AppendMessage(userMsg(text)); err != nil {
			t.Fatal(err)
		}
	}
	first.Close()
	otherPath := filepath.Join(dir, "other.jsonl")
	other, err := transcript.CreateAt(otherPath, "/q")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.AppendMessage(userMsg("elsewhere")); err != nil {
		t.Fatal(err)
	}
	other.Close()

	other, err = transcript.Open(otherPath, transcript.WithMirror(la.TranscriptMirror()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.AppendMessage(userMsg("after the switch")); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(otherPath)
	out := filepath.Join(t.TempDir(), "s1.jsonl")
	if found, err := b.RestoreTranscript(ctx, "s1", out); err != nil || !found {
		t.Fatalf("RestoreTranscript: %v %v", found, err)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
		t.Fatalf("restored:\n%s\nwant the switched-to file:\n%s", got, want)
	}
	info, err := a.st.state.Info(ctx, jetstream.WithSubjectFilter(txPrefix+"s1"))
	if err != nil {
		t.Fatal(err)
	}
	// One write: the other file whole with the entry appended to it.
	if n := info.State.Subjects[txPrefix+"s1"]; n != 1 {
		t.Fatalf("the subject holds %d messages, want 1", n)
	}
}

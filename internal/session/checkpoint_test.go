package session_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/session"
)

// scriptFileTurn scripts a turn that edits a.txt, rewrites b.txt and runs
// bash to create c.txt, then answers "done".
func scriptFileTurn(srv *wiremock.Server) {
	srv.Enqueue(wiremock.Script{ToolCalls: []wiremock.ToolCall{
		{ID: "e1", Name: "edit", Args: []string{`{"path":"a.txt","edits":[{"oldText":"two","newText":"TWO"}]}`}},
		{ID: "w1", Name: "write", Args: []string{`{"path":"b.txt","content":"b after\n"}`}},
		{ID: "b1", Name: "bash", Args: []string{`{"command":"echo made > c.txt"}`}},
	}}, wiremock.Script{Text: []string{"done"}})
}

func fileText(t *testing.T, dir, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if os.IsNotExist(err) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestCheckpointUndoAndRedo: a turn's diff names the three files it
// changed, /undo (Undo) puts them back and the conversation before the
// turn, UndoRevert brings both back; after reopening the session the
// same works again.
func TestCheckpointUndoAndRedo(t *testing.T) {
	cpDir := t.TempDir()
	h := newHarness(t, func(c *session.Config) { c.CheckpointDir = cpDir })
	os.WriteFile(filepath.Join(h.cwd, "a.txt"), []byte("one\ntwo\n"), 0o644)
	os.WriteFile(filepath.Join(h.cwd, "b.txt"), []byte("b before\n"), 0o644)
	ctx := context.Background()

	scriptFileTurn(h.srv)
	h.prompt("change the files")
	h.wait()
	before := map[string]string{"a.txt": "one\ntwo\n", "b.txt": "b before\n", "c.txt": "<none>"}
	after := map[string]string{"a.txt": "one\nTWO\n", "b.txt": "b after\n", "c.txt": "made\n"}
	check := func(when string, want map[string]string) {
		t.Helper()
		for name, w := range want {
			if got := fileText(t, h.cwd, name); got != w {
				t.Errorf("%s: %s = %q, want %q", when, name, got, w)
			}
		}
	}
	check("after the turn", after)

	turns, err := h.s.Checkpoints()
	if err != nil || len(turns) != 1 || turns[0].Index != 0 || turns[0].Prompt != "change the files" {
		t.Fatalf("checkpoints = %+v, %v", turns, err)
	}
	d, err := h.s.TurnDiff(ctx, turns[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range d.Files {
		files = append(files, f.Status+" "+f.Path)
	}
	if !slices.Equal(files, []string{"modified a.txt", "modified b.txt", "added c.txt"}) || d.Live {
		t.Fatalf("diff = %v (live %v)", files, d.Live)
	}

	res, err := h.s.Undo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || res.Turn != turns[0].ID || len(h.s.Messages()) != 0 {
		t.Fatalf("undo: %+v, %d messages left", res, len(h.s.Messages()))
	}
	check("after /undo", before)

	// A restart.
	file := h.s.File()
	h.s.Close()
	cfg := h.cfg
	cfg.Open = file
	s, err := session.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.UndoRevert(ctx); err != nil {
		t.Fatal(err)
	}
	check("after undoing the revert", after)
	if n := len(s.Messages()); n != 6 {
		t.Fatalf("the conversation has %d messages after the undo, want the turn's 6 back", n)
	}
	if _, err := s.RevertTurn(ctx, "", false); err != nil {
		t.Fatal(err)
	}
	check("after a revert without truncation", before)
	if n := len(s.Messages()); n != 6 {
		t.Fatalf("a revert without truncation changed the conversation: %d messages", n)
	}
	if _, err := s.UndoRevert(ctx); err != nil {
		t.Fatal(err)
	}
	check("after the second undo", after)
	if _, err := s.UndoRevert(ctx); err == nil {
		t.Fatal("undo with no revert left succeeded")
	}
}

// TestCheckpointsOff: a session without a checkpoint dir says so when
// asked for a diff or a revert; /undo still takes the conversation back
// before the last message, and with no message says there is nothing.
func TestCheckpointsOff(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	if _, err := h.s.Undo(ctx); err == nil || err.Error() != "there is nothing to undo: the conversation has no message from you" {
		t.Fatalf("undo of nothing: %v", err)
	}
	h.prompt("just talk")
	h.wait()
	for _, f := range []func() error{
		func() error { _, err := h.s.TurnDiff(ctx, ""); return err },
		func() error { _, err := h.s.RevertTurn(ctx, "", false); return err },
		func() error { _, err := h.s.UndoRevert(ctx); return err },
	} {
		if err := f(); err == nil || err.Error() != "checkpoints are off for this session (no data dir to keep them in)" {
			t.Errorf("with checkpoints off: %v", err)
		}
	}
	res, err := h.s.Undo(ctx)
	if err != nil || !res.Truncated || res.Prompt != "just talk" || len(h.s.Messages()) != 0 {
		t.Fatalf("undo of a turn without file changes: %+v, %v, %d messages", res, err, len(h.s.Messages()))
	}
}

// TestCheckpointHostileTurn: a turn whose bash swaps a directory for a
// symlink to a directory outside the workspace and writes through it, and
// replaces a file by a symlink to an outside file: the revert puts the
// directory and the file back as they were, inside the workspace, and
// nothing outside changes.
func TestCheckpointHostileTurn(t *testing.T) {
	cpDir := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("outside\n"), 0o644)
	h := newHarness(t, func(c *session.Config) { c.CheckpointDir = cpDir })
	os.MkdirAll(filepath.Join(h.cwd, "dir"), 0o755)
	os.WriteFile(filepath.Join(h.cwd, "dir", "f.txt"), []byte("inside\n"), 0o644)
	os.WriteFile(filepath.Join(h.cwd, "keep.txt"), []byte("keep\n"), 0o644)
	cmd := "rm -rf dir && ln -s " + outside + " dir && echo planted > dir/planted && rm keep.txt && ln -s " + filepath.Join(outside, "secret") + " keep.txt"
	h.srv.Enqueue(wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "b1", Name: "bash", Args: []string{`{"command":` + strconv.Quote(cmd) + `}`}}}},
		wiremock.Script{Text: []string{"done"}})
	h.prompt("be hostile")
	h.wait()
	if _, err := os.Stat(filepath.Join(outside, "planted")); err != nil {
		t.Fatalf("the turn did not run as scripted: %v", err)
	}
	if _, err := h.s.RevertTurn(context.Background(), "", false); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"dir", "keep.txt"} {
		fi, err := os.Lstat(filepath.Join(h.cwd, p))
		if err != nil || fi.Mode()&os.ModeSymlink != 0 {
			t.Fatalf("%s after the revert: %v, %v", p, fi, err)
		}
	}
	if got := fileText(t, h.cwd, "dir/f.txt"); got != "inside\n" {
		t.Errorf("dir/f.txt = %q", got)
	}
	if got := fileText(t, h.cwd, "keep.txt"); got != "keep\n" {
		t.Errorf("keep.txt = %q", got)
	}
	if got := fileText(t, outside, "secret"); got != "outside\n" {
		t.Errorf("the outside file changed: %q", got)
	}
	// What the model planted outside stays: a revert only writes inside.
	if ents, _ := os.ReadDir(outside); len(ents) != 2 {
		t.Errorf("outside has %d entries, want secret and planted", len(ents))
	}
}

// TestPromptRightAfterAgentEnd: a prompt sent as soon as agent_end is out
// starts the next run, while the workspace checkpoint after the run still
// holds the run slot; it is not refused as busy (pi's RpcClient prompts
// on agent_end).
func TestPromptRightAfterAgentEnd(t *testing.T) {
	h := newHarness(t, func(c *session.Config) { c.CheckpointDir = t.TempDir() })
	os.WriteFile(filepath.Join(h.cwd, "a.txt"), []byte("one\ntwo\n"), 0o644)
	ended := make(chan struct{}, 1)
	h.s.Subscribe(func(ev session.Event) {
		if ev.Type == "agent_end" {
			select {
			case ended <- struct{}{}:
			default:
			}
		}
	})
	scriptFileTurn(h.srv)
	h.srv.Enqueue(wiremock.Script{Text: []string{"again"}})
	h.prompt("change the files")
	<-ended
	if err := h.s.Prompt(session.UserMessage("next", nil), session.BehaviorNone); err != nil {
		t.Fatalf("a prompt right after agent_end: %v", err)
	}
	<-ended
	h.wait()
}

// TestUndoRightAfterAgentEnd: /undo, a fork or a new session asked for
// as soon as agent_end is out waits for the run's tail (its end-of-run
// checkpoint) instead of refusing the session as busy.
func TestUndoRightAfterAgentEnd(t *testing.T) {
	for _, op := range []string{"undo", "new_session"} {
		t.Run(op, func(t *testing.T) {
			h := newHarness(t, func(c *session.Config) { c.CheckpointDir = t.TempDir() })
			os.WriteFile(filepath.Join(h.cwd, "a.txt"), []byte("one\ntwo\n"), 0o644)
			ended := make(chan struct{}, 1)
			h.s.Subscribe(func(ev session.Event) {
				if ev.Type == "agent_end" {
					select {
					case ended <- struct{}{}:
					default:
					}
				}
			})
			scriptFileTurn(h.srv)
			h.prompt("change the files")
			<-ended
			var err error
			switch op {
			case "undo":
				_, err = h.s.Undo(t.Context())
			case "new_session":
				err = h.s.NewSession("")
			}
			if err != nil {
				t.Fatalf("%s right after agent_end: %v", op, err)
			}
			h.wait()
		})
	}
}

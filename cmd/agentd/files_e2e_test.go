package main

// What a command may touch on disk (issue 9): export_html writes only
// under the session's cwd or <data-dir>/exports and replaces nothing
// agentd keeps; a FIFO among the session files hangs nothing; one file
// is never loaded by two sessions, whatever path names it.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// svPromptWait bounds a command that must answer at once; it only fires
// when something hangs, which is what these tests look for.
const svPromptWait = 10 * time.Second

// svCallWithin sends cmd (with a fresh id) and waits at most limit for
// its response, failing the test if none comes.
func svCallWithin(t *testing.T, c *svConn, limit time.Duration, typ string, fields svM) svFrame {
	t.Helper()
	cmd := svM{"id": c.newID(typ), "type": typ}
	for k, v := range fields {
		cmd[k] = v
	}
	from := c.mark()
	c.send(cmd)
	_, f, err := c.tryWaitFor(from, limit, func(f svFrame) bool { return f.isResponse(cmd["id"].(string)) })
	if err != nil {
		c.fatalf("%s got no response: %v", svJSON(cmd), err)
	}
	return f
}

func TestServeExportHTMLPaths(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	outside := filepath.Join(e.root, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	s := svStartInProc(t, e)
	c := s.dial("A")
	// w works in the usual cwd; r in a directory that holds the data dir,
	// so the server's own files are inside its cwd.
	c.must("create_session", svM{"sessionId": "w", "cwd": e.cwd})
	svPrompt(c, "w", "export me")
	c.must("create_session", svM{"sessionId": "r", "cwd": e.root})
	svPrompt(c, "r", "root session")
	wFile := svStr(c.must("get_state", svM{"sessionId": "w"}).m, "data", "sessionFile")
	journal := filepath.Join(e.data, "server", "journal.jsonl")
	index := filepath.Join(e.data, "server", "sessions.jsonl")
	fpKey := filepath.Join(e.data, "server", "fingerprint.key")
	existing := filepath.Join(e.cwd, "existing.html")
	if err := os.WriteFile(existing, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(e.cwd, "out-link")); err != nil {
		t.Fatal(err)
	}
	snapshot := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	journalBefore, indexBefore, wBefore, keyBefore := snapshot(journal), snapshot(index), snapshot(wFile), snapshot(fpKey)

	refusals := []struct {
		name, sid, path string
		overwrite       bool
		want            string
	}{
		{"the journal, outside the cwd", "w", journal, true, "export path " + journal + " is outside the session's working directory " + e.cwd + " and " + filepath.Join(e.data, "exports")},
		{"the journal", "r", journal, false, "export path " + journal + " is a file agentd keeps"},
		{"the journal with overwrite", "r", journal, true, "export path " + journal + " is a file agentd keeps"},
		{"the journal, relative", "r", "data/server/journal.jsonl", true, "is a file agentd keeps"},
		{"the session index", "r", index, true, "export path " + index + " is a file agentd keeps"},
		{"the journal's fingerprint key", "r", fpKey, true, "export path " + fpKey + " is a file agentd keeps"},
		{"another live session's file", "r", wFile, true, "export path " + wFile + " is a file agentd keeps"},
		{"an existing file", "w", "existing.html", false, "export path " + existing + " exists; send overwrite: true to replace it"},
		{"a path outside", "w", filepath.Join(outside, "x.html"), false, "is outside the session's working directory"},
		{"dot-dot out of the cwd", "w", "../outside/y.html", false, "is outside the session's working directory"},
		{"a symlinked directory leading out", "w", "out-link/z.html", false, "is outside the session's working directory"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			c := c.on(t)
			fields := svM{"sessionId": tc.sid, "outputPath": tc.path}
			if tc.overwrite {
				fields["overwrite"] = true
			}
			r := c.do("export_html", fields)
			if b, _ := r.m["success"].(bool); b || !strings.Contains(svStr(r.m, "error"), tc.want) {
				t.Errorf("export_html %s: want an error containing %q, got %s", tc.path, tc.want, r)
			}
		})
	}
	if b := snapshot(journal); !bytes.HasPrefix(b, journalBefore) || bytes.Contains(b, []byte("<html")) {
		t.Errorf("the journal was overwritten: %s", e2eClip(string(b), 200))
	}
	if b := snapshot(index); !bytes.HasPrefix(b, indexBefore) || bytes.Contains(b, []byte("<html")) {
		t.Errorf("the session index was overwritten: %s", e2eClip(string(b), 200))
	}
	if b := snapshot(fpKey); !bytes.Equal(b, keyBefore) {
		t.Errorf("the fingerprint key changed: %d bytes", len(b))
	}
	if b := snapshot(wFile); !bytes.Equal(b, wBefore) {
		t.Errorf("session w's file changed: %s", e2eClip(string(b), 200))
	}
	if b := snapshot(existing); string(b) != "keep me" {
		t.Errorf("the existing file was overwritten: %s", e2eClip(string(b), 200))
	}
	for _, p := range []string{filepath.Join(outside, "x.html"), filepath.Join(outside, "y.html"), filepath.Join(outside, "z.html")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was written", p)
		}
	}
	// The session still works: its next message lands in its own file.
	svPrompt(c, "w", "still mine")
	if b := snapshot(wFile); !bytes.Contains(b, []byte("still mine")) {
		t.Errorf("session w's file lost the next message")
	}

	t.Run("allowed", func(t *testing.T) {
		c := c.on(t)
		r := c.must("export_html", svM{"sessionId": "w", "outputPath": "existing.html", "overwrite": true})
		svEq(t, "path", svAt(r.m, "data", "path"), existing)
		if b := snapshot(existing); !bytes.Contains(b, []byte("export me")) {
			t.Errorf("overwrite: true did not replace the file: %s", e2eClip(string(b), 100))
		}
		exported := filepath.Join(e.data, "exports", "w.html")
		r = c.must("export_html", svM{"sessionId": "w", "outputPath": exported})
		svEq(t, "path", svAt(r.m, "data", "path"), exported)
		if b := snapshot(exported); !bytes.Contains(b, []byte("export me")) {
			t.Errorf("the export to the exports folder: %s", e2eClip(string(b), 100))
		}
	})
}

func TestServeFIFOInSessionsDir(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	dir := filepath.Join(e.data, "sessions", "--fifo--")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "2026-01-01T00-00-00-000Z_evil.jsonl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	s := svStart(t, e)
	c := s.dial("A")
	svCreate(c, "s1")
	svPrompt(c, "s1", "a stored session")
	sessionFile := svStr(c.must("get_state", svM{"sessionId": "s1"}).m, "data", "sessionFile")

	// Every call answers at once and lists the real session, not the FIFO.
	for i := range 3 {
		r := svCallWithin(t, c, svPromptWait, "list_stored_sessions", nil)
		if !svWantOK(t, r) {
			continue
		}
		if !strings.Contains(r.raw, svJSON(sessionFile)) || strings.Contains(r.raw, "evil") {
			t.Errorf("list_stored_sessions #%d: want %s listed and the FIFO left out, got %s", i, sessionFile, r)
		}
	}
	r := svCallWithin(t, c, svPromptWait, "load_session", svM{"sessionPath": fifo})
	svWantErr(t, r, fmt.Sprintf("Failed to load session from %s: it is not a regular file", fifo))
	// The lanes are free: the server still serves.
	svCallWithin(t, c, svPromptWait, "list_sessions", nil)
	svPrompt(c, "s1", "still here")

	s.sigterm()
	svEq(t, "exit code", s.waitExit(), 0)
}

func TestServeLoadHardLinkRefused(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e)
	c := s.dial("A")
	svCreate(c, "s1")
	svPrompt(c, "s1", "one file, one session")
	sessionFile := svStr(c.must("get_state", svM{"sessionId": "s1"}).m, "data", "sessionFile")
	hard := filepath.Join(filepath.Dir(sessionFile), "alias.jsonl")
	if err := os.Link(sessionFile, hard); err != nil {
		t.Fatal(err)
	}
	soft := filepath.Join(filepath.Dir(sessionFile), "alias-link.jsonl")
	if err := os.Symlink(sessionFile, soft); err != nil {
		t.Fatal(err)
	}
	// The file's own path and a symlink resolve to the path s1 was
	// indexed under, so they ask for s1's id again; the hard link is
	// another path that only the file's identity gives away.
	for _, p := range []string{sessionFile, soft} {
		r := c.do("load_session", svM{"sessionPath": p})
		if msg := svStr(r.m, "error"); r.m["success"] != false ||
			(msg != "Session s1 already exists" && msg != fmt.Sprintf("Session file %s is already loaded as session s1", p)) {
			t.Errorf("load_session %s while s1 has it: %s", p, r)
		}
	}
	r := c.do("load_session", svM{"sessionPath": hard})
	svWantErr(t, r, fmt.Sprintf("Session file %s is already loaded as session s1", hard))
	ls := c.must("list_stored_sessions", nil)
	for _, si := range svArr(ls.m, "data", "sessions") {
		if p := svStr(si, "sessionPath"); p == sessionFile || p == hard {
			svEq(t, p+" loaded", svAt(si, "loaded"), true)
		}
	}
	if n := len(svArr(c.must("list_sessions", nil).m, "data", "sessions")); n != 1 {
		t.Errorf("%d sessions, want s1 alone", n)
	}
	// Once s1 is gone the link is just another path to the file.
	c.must("delete_session", svM{"sessionId": "s1"})
	r = c.must("load_session", svM{"sessionPath": hard, "sessionId": "again"})
	svEq(t, "sessionId", svAt(r.m, "data", "sessionId"), "again")
	svEq(t, "messages", svTexts(svMessages(c, "again")), []string{"one file, one session", svAnswer("one file, one session")})
}

// agentd rpc applies the same rules: its cwd and <data-dir>/exports,
// and overwrite only when asked.
func TestRPCExportHTMLPaths(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	outside := filepath.Join(e.root, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(e.cwd, "existing.html")
	if err := os.WriteFile(existing, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := e.start()
	e2eWantFailure(t, p.call(`{"id":"x1","type":"export_html","outputPath":"existing.html"}`),
		"export path "+existing+" exists; send overwrite: true to replace it")
	if b, _ := os.ReadFile(existing); string(b) != "keep me" {
		t.Errorf("the existing file was overwritten: %.80s", b)
	}
	e2eWantFailure(t, p.call(fmt.Sprintf(`{"id":"x2","type":"export_html","outputPath":%q}`, filepath.Join(outside, "x.html"))),
		"is outside the session's working directory "+e.cwd+" and "+filepath.Join(e.data, "exports"))
	if _, err := os.Lstat(filepath.Join(outside, "x.html")); err == nil {
		t.Error("an export was written outside")
	}
	r := p.ok(`{"id":"x3","type":"export_html","outputPath":"existing.html","overwrite":true}`)
	e2eEqual(t, "path", e2eStr(r, "data", "path"), existing)
	exported := filepath.Join(e.data, "exports", "rpc.html")
	r = p.ok(fmt.Sprintf(`{"id":"x4","type":"export_html","outputPath":%q}`, exported))
	e2eEqual(t, "path", e2eStr(r, "data", "path"), exported)
	for _, f := range []string{existing, exported} {
		if b, _ := os.ReadFile(f); !bytes.Contains(b, []byte("<html")) {
			t.Errorf("%s is not an export: %.80s", f, b)
		}
	}
}

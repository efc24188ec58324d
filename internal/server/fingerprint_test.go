package server

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/pipeline"
)

// The fingerprints the command journal keeps of requests are keyed
// (HMAC-SHA256) with a key made once in the state directory: a
// fingerprint on disk cannot be checked offline against guesses of a
// secret in the request, and a request repeated under its idempotency
// key after a kill -9 still fingerprints as before, so it is replayed.
func TestJournalFingerprintIsKeyed(t *testing.T) {
	e := newEnv(t)
	journalPath := filepath.Join(e.root, "journal.jsonl")
	calls := 0
	reg := pipeline.Registry{"test.remember": {Class: pipeline.ClassMutate, Lane: pipeline.LaneServer,
		Run: func(context.Context, pipeline.Command) (json.RawMessage, error) {
			calls++
			return json.RawMessage(`{"ok":true}`), nil
		}}}
	start := func() (*Server, *pipeline.FileJournal) {
		t.Helper()
		j, err := pipeline.OpenFileJournal(journalPath)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = j.Close() })
		c := Config{Builder: fauxBuilder{e.faux}, Journal: j, Cwd: e.cwd, SessionsDir: e.sessions, StateDir: e.state}
		s, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Register(reg); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s, j
	}
	submit := func(s *Server, cmd pipeline.Command) pipeline.Response {
		t.Helper()
		ch := make(chan pipeline.Response, 1)
		s.Submit(cmd, func(r pipeline.Response) { ch <- r })
		return <-ch
	}
	// A weak secret, as a client may send in an MCP server's env.
	cmd := pipeline.Command{Type: "test.remember", IdempotencyKey: "k1", Payload: json.RawMessage(`{"env":{"TOKEN":"1234"}}`)}

	s, j := start()
	if r := submit(s, cmd); !r.Success || r.Replayed {
		t.Fatalf("first request: %+v", r)
	}
	keyPath := filepath.Join(e.state, fingerprintKeyFile)
	fi, err := os.Stat(keyPath)
	if err != nil {
		t.Fatalf("no key file: %v", err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Fatalf("key file mode %v, want 0600", m)
	}
	key, err := readFingerprintKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	crash(s)
	_ = j.Close()

	fps := journalFingerprints(t, journalPath)
	if len(fps) == 0 {
		t.Fatal("nothing journaled")
	}
	plain, keyed := pipeline.Fingerprint(nil, cmd), pipeline.Fingerprint(key, cmd)
	if plain == keyed {
		t.Fatal("the keyed fingerprint is the plain SHA-256 one")
	}
	for _, fp := range fps {
		if fp != keyed {
			t.Fatalf("journaled fingerprint %s; keyed %s, plain SHA-256 %s", fp, keyed, plain)
		}
	}

	// After the crash, a new server on the same directory: the same key,
	// so the same request is replayed and another one under its key is
	// refused.
	s, _ = start()
	if r := submit(s, cmd); !r.Success || !r.Replayed || calls != 1 {
		t.Fatalf("the request repeated after a restart: %+v (run %d times)", r, calls)
	}
	other := cmd
	other.Payload = json.RawMessage(`{"env":{"TOKEN":"1235"}}`)
	if r := submit(s, other); r.Success || calls != 1 {
		t.Fatalf("another request under the same key after a restart: %+v (run %d times)", r, calls)
	}
	if again, err := readFingerprintKey(keyPath); err != nil || string(again) != string(key) {
		t.Fatalf("the key changed across the restart (%v)", err)
	}
}

// A damaged key file stops the server rather than being replaced: a new
// key would turn every repeated request into a conflict.
func TestJournalFingerprintKeyDamaged(t *testing.T) {
	e := newEnv(t)
	if err := os.MkdirAll(e.state, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.state, fingerprintKeyFile)
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Config{Builder: fauxBuilder{e.faux}, Cwd: e.cwd, SessionsDir: e.sessions, StateDir: e.state})
	if err == nil {
		t.Fatal("a server started with a damaged key file")
	}
	// The operator is told which file and what to do about it.
	if msg := err.Error(); !strings.Contains(msg, path+" is damaged") || !strings.Contains(msg, "remove it to make a new one") {
		t.Fatalf("the error does not name the file and the remedy: %v", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "short\n" {
		t.Fatalf("the damaged key file was replaced: %q (%v)", b, err)
	}
}

// journalFingerprints are the fingerprints of the records in the journal
// file at path.
func journalFingerprints(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r pipeline.Record
		if pipeline.UnmarshalRecord(sc.Bytes(), &r) == nil && r.Fingerprint != "" {
			out = append(out, r.Fingerprint)
		}
	}
	return out
}

package server

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentd-dev/agentd/internal/fault"
)

func TestCheckSessionPath(t *testing.T) {
	root := t.TempDir()
	mk := func(p string) string {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("{}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sessionsDir := filepath.Join(root, "sessions")
	s := &Server{cfg: Config{SessionsDir: sessionsDir, AllowedDirs: []string{filepath.Join(root, "allowed")}, Home: filepath.Join(root, "home"), Cwd: filepath.Join(root, "work")}}

	inSessions := mk("sessions/--cwd--/a.jsonl")
	inAllowed := mk("allowed/deep/b.json")
	inHome := mk("home/.pi/agent/sessions/c.jsonl")
	inWorkspace := mk("work/.pi/sessions/d.jsonl")
	// Another project's sessions, which no setting allows: pi-server's spec
	// once allowed any .pi/sessions directory on the host.
	otherProject := mk("proj/.pi/sessions/d.jsonl")
	nested := mk("work/sub/.pi/sessions/d.jsonl")
	outside := mk("elsewhere/e.jsonl")
	sibling := mk("sessions-evil/f.jsonl")
	mk("sessions/notes.txt")
	escape := filepath.Join(sessionsDir, "escape.jsonl")
	if err := os.Symlink(outside, escape); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "elsewhere"), filepath.Join(sessionsDir, "link-out")); err != nil {
		t.Fatal(err)
	}
	into := filepath.Join(root, "elsewhere", "into.jsonl")
	if err := os.Symlink(inSessions, into); err != nil {
		t.Fatal(err)
	}

	notAllowed := fmt.Sprintf("sessionPath must be under an allowed session directory (%s, %s, ~/.pi/agent/sessions, %s)",
		sessionsDir, filepath.Join(root, "allowed"), filepath.Join(root, "work", ".pi", "sessions"))
	refused := []struct {
		path, msg string
		code      fault.Code
	}{
		{"sessions/a.jsonl", "sessionPath must be an absolute path", fault.Invalid},
		{"a.jsonl", "sessionPath must be an absolute path", fault.Invalid},
		{sessionsDir + "/../elsewhere/e.jsonl", "Validation failed: sessionPath: sessionPath contains potentially dangerous path components", fault.Invalid},
		{"../x.jsonl", "Validation failed: sessionPath: sessionPath contains potentially dangerous path components", fault.Invalid},
		{"~/.pi/agent/sessions/c.jsonl", "Validation failed: sessionPath: sessionPath contains potentially dangerous path components", fault.Invalid},
		{sessionsDir + "/a\x00.jsonl", "Validation failed: sessionPath: sessionPath contains potentially dangerous path components", fault.Invalid},
		{filepath.Join(sessionsDir, "notes.txt"), "sessionPath must point to a .jsonl or .json session file", fault.Invalid},
		{filepath.Join(sessionsDir, "noext"), "sessionPath must point to a .jsonl or .json session file", fault.Invalid},
		{escape, notAllowed, fault.Forbidden},
		{outside, notAllowed, fault.Forbidden},
		{sibling, notAllowed, fault.Forbidden},
		{otherProject, notAllowed, fault.Forbidden},
		{nested, notAllowed, fault.Forbidden},
		{"/tmp/.pi/sessions/x.jsonl", notAllowed, fault.Forbidden},
		{filepath.Join(sessionsDir, "missing.jsonl"), "Session file " + filepath.Join(sessionsDir, "missing.jsonl") + " does not exist", fault.NotFound},
		// Outside the allowed places, a missing file is refused as outside:
		// the answer tells nothing of what exists there.
		{filepath.Join(root, "elsewhere", "missing.jsonl"), notAllowed, fault.Forbidden},
		{filepath.Join(root, "nowhere", "deep", "missing.jsonl"), notAllowed, fault.Forbidden},
		{filepath.Join(sessionsDir, "link-out", "missing.jsonl"), notAllowed, fault.Forbidden},
	}
	for _, tt := range refused {
		got, err := s.CheckSessionPath(tt.path)
		if err == nil {
			t.Errorf("CheckSessionPath(%q) = %q, want refused with %q", tt.path, got, tt.msg)
			continue
		}
		if err.Error() != tt.msg {
			t.Errorf("CheckSessionPath(%q): %q\n want %q", tt.path, err.Error(), tt.msg)
		}
		if c := fault.CodeOf(err); c != tt.code {
			t.Errorf("CheckSessionPath(%q): code %s, want %s", tt.path, c, tt.code)
		}
	}
	accepted := []struct{ path, real string }{
		{inSessions, inSessions},
		{inAllowed, inAllowed},
		{inHome, inHome},
		{inWorkspace, inWorkspace},
		{into, inSessions}, // a link from outside into the sessions directory
	}
	for _, tt := range accepted {
		got, err := s.CheckSessionPath(tt.path)
		if err != nil {
			t.Errorf("CheckSessionPath(%q): %v, want accepted", tt.path, err)
		} else if got != tt.real {
			t.Errorf("CheckSessionPath(%q) = %q, want %q", tt.path, got, tt.real)
		}
	}
}

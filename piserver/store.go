package piserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/pipeline"
	"github.com/agentd-dev/agentd/transcript"
)

// sessionIndex remembers which server session id each session file had,
// so list_stored_sessions shows the ids clients chose and load_session
// after a restart brings a session back under the same id. It is an
// append-only JSONL file (the last line for a file wins), rewritten
// compactly when it is opened, so recording a session costs one small
// append however many there are.
type sessionIndex struct {
	path string // "" keeps the index in memory

	mu     sync.Mutex
	byFile map[string]indexEntry
	f      *os.File
}

type indexEntry struct {
	ID      string    `json:"sessionId"`
	File    string    `json:"sessionFile"`
	Cwd     string    `json:"cwd"`
	Created time.Time `json:"createdAt"`
}

func openIndex(dir string) (*sessionIndex, error) {
	x := &sessionIndex{byFile: map[string]indexEntry{}}
	if dir == "" {
		return x, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("server state directory: %w", err)
	}
	x.path = filepath.Join(dir, "sessions.jsonl")
	data, err := os.ReadFile(x.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("session index: %w", err)
	}
	// A damaged line loses only the id a client chose for one file; the
	// file is still listed under its own id.
	for _, line := range strings.Split(string(data), "\n") {
		var e indexEntry
		if json.Unmarshal([]byte(line), &e) == nil && e.File != "" {
			x.byFile[e.File] = e
		}
	}
	list := x.sorted()
	var b []byte
	for _, e := range list {
		line, _ := json.Marshal(e)
		b = append(append(b, line...), '\n')
	}
	tmp := x.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return nil, fmt.Errorf("session index: %w", err)
	}
	if err := os.Rename(tmp, x.path); err != nil {
		return nil, fmt.Errorf("session index: %w", err)
	}
	if x.f, err = os.OpenFile(x.path, os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return nil, fmt.Errorf("session index: %w", err)
	}
	return x, nil
}

func (x *sessionIndex) put(e indexEntry) {
	if e.File == "" {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.byFile[e.File] = e
	if x.f != nil {
		line, _ := json.Marshal(e)
		_, _ = x.f.Write(append(line, '\n'))
	}
}

func (x *sessionIndex) close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.f == nil {
		return nil
	}
	err := x.f.Close()
	x.f = nil
	return err
}

func (x *sessionIndex) get(file string) (indexEntry, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.byFile[file]
	return e, ok
}

func (x *sessionIndex) all() []indexEntry {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.sorted()
}

// sorted lists the entries oldest first; x.mu is held or x is private.
func (x *sessionIndex) sorted() []indexEntry {
	out := make([]indexEntry, 0, len(x.byFile))
	for _, e := range x.byFile {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out
}

// storedSession is one entry of list_stored_sessions (spec §20.1).
type storedSession struct {
	SessionID    string `json:"sessionId"`
	SessionName  string `json:"sessionName,omitempty"`
	SessionFile  string `json:"sessionFile"`
	SessionPath  string `json:"sessionPath"`
	Cwd          string `json:"cwd"`
	CreatedAt    string `json:"createdAt"`
	ModifiedAt   string `json:"modifiedAt,omitempty"`
	MessageCount int    `json:"messageCount"`
	FileExists   bool   `json:"fileExists"`
	Loaded       bool   `json:"loaded"`
}

// storedSessions lists the session files under the sessions directory and
// the ones the index knows elsewhere, most recently active first.
func (s *Server) storedSessions() ([]storedSession, error) {
	loaded := map[string]bool{}
	for _, e := range s.entries() {
		if f := e.sess.File(); f != "" {
			loaded[f] = true
		}
	}
	var infos []transcript.Info
	if s.opt.SessionsDir != "" {
		var err error
		if infos, err = transcript.ListAll(s.opt.SessionsDir); err != nil {
			return nil, fmt.Errorf("listing %s: %w", s.opt.SessionsDir, err)
		}
	}
	seen := map[string]bool{}
	out := []storedSession{}
	add := func(info transcript.Info, exists bool) {
		seen[info.Path] = true
		id := info.ID
		created := info.Created
		if e, ok := s.index.get(info.Path); ok {
			id = e.ID
		}
		st := storedSession{SessionID: id, SessionName: info.Name, SessionFile: info.Path, SessionPath: info.Path,
			Cwd: info.Cwd, CreatedAt: created.UTC().Format(time.RFC3339Nano), MessageCount: info.MessageCount,
			FileExists: exists, Loaded: loaded[info.Path]}
		if !info.Modified.IsZero() {
			st.ModifiedAt = info.Modified.UTC().Format(time.RFC3339Nano)
		}
		if st.Cwd == "" {
			st.Cwd = "/unknown"
		}
		out = append(out, st)
	}
	for _, info := range infos {
		add(info, true)
	}
	for _, e := range s.index.all() {
		if seen[e.File] {
			continue
		}
		info, err := transcript.ReadInfo(e.File)
		if err != nil {
			info = transcript.Info{Path: e.File, ID: e.ID, Cwd: e.Cwd, Created: e.Created}
		}
		add(info, err == nil)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].ModifiedAt > out[j].ModifiedAt })
	return out, nil
}

// Errors of the session-path rule (spec §20.2), pi-server's wording.
const (
	msgPathNotAbs    = "sessionPath must be an absolute path"
	msgPathDangerous = "Validation failed: sessionPath: sessionPath contains potentially dangerous path components"
	msgPathExt       = "sessionPath must point to a .jsonl or .json session file"
)

// checkSessionPath applies the allowed-directory rule to a session file a
// client names: absolute, no "..", no "~", a .jsonl/.json file, and, once
// every symlink is resolved, under the server's sessions directory, an
// --allow-session-dir, ~/.pi/agent/sessions or a .pi/sessions directory.
func (s *Server) checkSessionPath(p string) (string, error) {
	if strings.ContainsRune(p, 0) || strings.HasPrefix(p, "~") || hasDotDot(p) {
		return "", pipeline.Errorf(pipeline.CodeInvalid, msgPathDangerous)
	}
	if !filepath.IsAbs(p) {
		return "", pipeline.Errorf(pipeline.CodeInvalid, msgPathNotAbs)
	}
	if ext := filepath.Ext(p); ext != ".jsonl" && ext != ".json" {
		return "", pipeline.Errorf(pipeline.CodeInvalid, msgPathExt)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", pipeline.Errorf(pipeline.CodeInvalid, "Session file %s does not exist", p)
		}
		return "", pipeline.Errorf(pipeline.CodeInvalid, "Session file %s cannot be read", p)
	}
	for _, root := range s.allowedRoots() {
		if within(real, root) {
			return real, nil
		}
	}
	if hasPiSessionsDir(real) {
		return real, nil
	}
	return "", pipeline.Errorf(pipeline.CodeInvalid, "sessionPath must be under an allowed session directory (e.g., %s, ~/.pi/agent/sessions/ or .pi/sessions/)", s.opt.SessionsDir)
}

func (s *Server) allowedRoots() []string {
	var roots []string
	add := func(d string) {
		if d == "" {
			return
		}
		if r, err := filepath.EvalSymlinks(d); err == nil {
			roots = append(roots, r)
		}
	}
	add(s.opt.SessionsDir)
	for _, d := range s.opt.AllowedDirs {
		add(d)
	}
	if s.opt.Home != "" {
		add(filepath.Join(s.opt.Home, ".pi", "agent", "sessions"))
	}
	return roots
}

func within(p, root string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// hasPiSessionsDir reports whether p lies in a project-local .pi/sessions
// directory.
func hasPiSessionsDir(p string) bool {
	parts := strings.Split(filepath.ToSlash(filepath.Dir(p)), "/")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == ".pi" && parts[i+1] == "sessions" {
			return true
		}
	}
	return false
}

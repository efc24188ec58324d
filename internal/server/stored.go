package server

import (
	"fmt"
	"sort"
	"time"

	"github.com/agentd-dev/agentd/internal/transcript"
)

// Stored is a session file the server can load: one under the sessions
// directory, or one the index knows elsewhere.
type Stored struct {
	// ID is the id the session had on this server, else the file's own.
	ID           string
	Name         string
	File         string
	Cwd          string
	Created      time.Time
	Modified     time.Time
	MessageCount int
	Exists       bool
	Loaded       bool
}

// Stored lists the stored sessions, most recently active first.
func (s *Server) Stored() ([]Stored, error) {
	loaded := map[string]bool{}
	loadedIDs := map[transcript.FileID]bool{} // a hard link is loaded too
	for _, h := range s.Sessions() {
		if f := h.sess.File(); f != "" {
			loaded[f] = true
			if id, err := transcript.FileIDOf(f); err == nil {
				loadedIDs[id] = true
			}
		}
	}
	var infos []transcript.Info
	if s.cfg.SessionsDir != "" {
		var err error
		if infos, err = transcript.ListAll(s.cfg.SessionsDir); err != nil {
			return nil, fmt.Errorf("listing %s: %w", s.cfg.SessionsDir, err)
		}
	}
	seen := map[string]bool{}
	out := []Stored{}
	add := func(info transcript.Info, exists bool) {
		seen[info.Path] = true
		id := info.ID
		if known, ok := s.index.idOf(info.Path); ok {
			id = known
		}
		out = append(out, Stored{ID: id, Name: info.Name, File: info.Path, Cwd: info.Cwd, Created: info.Created,
			Modified: info.Modified, MessageCount: info.MessageCount, Exists: exists, Loaded: loaded[info.Path] || loadedIDs[info.FileID]})
	}
	for _, info := range infos {
		add(info, true)
	}
	for _, e := range s.index.all() {
		if e.File == "" || seen[e.File] {
			continue
		}
		info, err := transcript.ReadInfo(e.File)
		if err != nil {
			info = transcript.Info{Path: e.File, ID: e.ID, Cwd: e.Cwd, Created: e.Created}
		}
		add(info, err == nil)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Modified.After(out[j].Modified) })
	return out, nil
}

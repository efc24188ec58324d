// Package trust records which projects a person trusted to start
// processes from their own files (a project's .agentd/mcp.json names
// commands agentd would run as MCP servers). A model that can write the
// workspace can write those files, so their appearing proves nothing: a
// project's file is used only when a person granted it, and the grant
// is kept outside every workspace, keyed by the project's real path and
// by a hash of the file's content, so a changed file is a file nobody
// trusted yet.
package trust

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/atomicfile"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

// FileName is the store's file in agentd's configuration directory.
const FileName = "trusted-projects.json"

// Store is the grants, in one JSON file (0600). It is safe for
// concurrent use within a process; two processes granting at the same
// moment may lose one grant, which then is asked for again, never the
// other way round.
type Store struct {
	path string
	mu   sync.Mutex
}

// Open returns the store kept at path (the file need not exist).
func Open(path string) *Store { return &Store{path: path} }

// Path is the store's file.
func (s *Store) Path() string { return s.path }

// Grant is one trusted file of one project.
type Grant struct {
	// Project is the project directory's real path.
	Project string `json:"project"`
	// File is the file, relative to Project (".agentd/mcp.json").
	File string `json:"file"`
	// SHA256 is the hex hash of the content that was trusted.
	SHA256 string `json:"sha256"`
	// At is when it was granted.
	At time.Time `json:"at"`
}

type document struct {
	Grants []Grant `json:"grants"`
}

// Hash is the hash a grant records for content.
func Hash(content []byte) string {
	h := sha256.Sum256(content)
	return hex.EncodeToString(h[:])
}

// key resolves dir to the path a grant is recorded under, and refuses a
// project that contains the store itself: a model that may write the
// project could then write its own grant.
func (s *Store) key(dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("project directory %q is not absolute", dir)
	}
	real, err := sandbox.RealPath(dir)
	if err != nil {
		return "", fmt.Errorf("project directory %s: %w", dir, err)
	}
	store, err := sandbox.RealPath(s.path)
	if err != nil {
		return "", fmt.Errorf("trust store %s: %w", s.path, err)
	}
	if rel, err := filepath.Rel(real, store); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("project %s contains agentd's trust store (%s): a project there cannot be trusted, since what works in it could write its own grant; use a project directory that does not contain agentd's configuration directory", real, s.path)
	}
	return real, nil
}

// Trusted reports whether file (relative to the project dir) with
// exactly content was granted. Any problem reading the store counts as
// not trusted.
func (s *Store) Trusted(dir, file string, content []byte) bool {
	project, err := s.key(dir)
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	doc, err := s.load()
	if err != nil {
		return false
	}
	h := Hash(content)
	for _, g := range doc.Grants {
		if g.Project == project && g.File == file && g.SHA256 == h {
			return true
		}
	}
	return false
}

// Grant records that file of the project dir, with exactly content, is
// trusted; a grant of the same file before is replaced.
func (s *Store) Grant(dir, file string, content []byte) error {
	project, err := s.key(dir)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	doc, err := s.load()
	if err != nil {
		return err
	}
	out := doc.Grants[:0]
	for _, g := range doc.Grants {
		if g.Project != project || g.File != file {
			out = append(out, g)
		}
	}
	doc.Grants = append(out, Grant{Project: project, File: file, SHA256: Hash(content), At: time.Now().UTC()})
	return s.save(doc)
}

// Revoke removes every grant of the project dir; it reports how many
// there were.
func (s *Store) Revoke(dir string) (int, error) {
	project, err := s.key(dir)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	doc, err := s.load()
	if err != nil {
		return 0, err
	}
	out := doc.Grants[:0]
	for _, g := range doc.Grants {
		if g.Project != project {
			out = append(out, g)
		}
	}
	n := len(doc.Grants) - len(out)
	doc.Grants = out
	if n == 0 {
		return 0, nil
	}
	return n, s.save(doc)
}

// List is every grant, by project and file.
func (s *Store) List() ([]Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	doc, err := s.load()
	if err != nil {
		return nil, err
	}
	return doc.Grants, nil
}

func (s *Store) load() (document, error) {
	var doc document
	data, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return doc, nil
	}
	if err != nil {
		return doc, fmt.Errorf("trust store: %w", err)
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return doc, fmt.Errorf("trust store %s: %w", s.path, err)
	}
	return doc, nil
}

func (s *Store) save(doc document) error {
	sort.Slice(doc.Grants, func(i, j int) bool {
		a, b := doc.Grants[i], doc.Grants[j]
		if a.Project != b.Project {
			return a.Project < b.Project
		}
		return a.File < b.File
	})
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return fmt.Errorf("trust store: %w", err)
	}
	if err := atomicfile.Write(s.path, append(data, '\n'), true); err != nil {
		return fmt.Errorf("trust store: %w", err)
	}
	return nil
}

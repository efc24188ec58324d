// Package settings is agentd's settings.json in its config dir: the
// choices pi persists when a client changes them (default model and
// thinking level, queue modes, auto-compaction, auto-retry), with pi's
// key names so a pi settings file reads the same. Keys agentd does not
// know are kept as they are.
package settings

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/agentd-dev/agentd/internal/atomicfile"
)

// Settings are the values agentd reads; zero values mean "not set".
type Settings struct {
	DefaultProvider      string      `json:"defaultProvider,omitempty"`
	DefaultModel         string      `json:"defaultModel,omitempty"`
	DefaultThinkingLevel string      `json:"defaultThinkingLevel,omitempty"`
	SteeringMode         string      `json:"steeringMode,omitempty"`
	FollowUpMode         string      `json:"followUpMode,omitempty"`
	Compaction           *Compaction `json:"compaction,omitempty"`
	Retry                *Retry      `json:"retry,omitempty"`
}

// Compaction settings, as pi's.
type Compaction struct {
	Enabled          *bool  `json:"enabled,omitempty"`
	ReserveTokens    *int64 `json:"reserveTokens,omitempty"`
	KeepRecentTokens *int64 `json:"keepRecentTokens,omitempty"`
}

// Retry settings, as pi's.
type Retry struct {
	Enabled     *bool  `json:"enabled,omitempty"`
	MaxRetries  *int   `json:"maxRetries,omitempty"`
	BaseDelayMs *int64 `json:"baseDelayMs,omitempty"`
}

// Store reads and updates one settings.json. It is safe for concurrent
// use; each update rewrites the file atomically.
type Store struct {
	path string
	mu   sync.Mutex
	raw  map[string]json.RawMessage
	s    Settings
}

// Open reads path; a missing file is empty settings. A malformed file is
// an error naming it, so a typo never silently resets a user's choices.
func Open(path string) (*Store, error) {
	st := &Store{path: path, raw: map[string]json.RawMessage{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading settings: %w", err)
	}
	if err := json.Unmarshal(data, &st.raw); err != nil {
		return nil, fmt.Errorf("settings file %s is not a JSON object: %w", path, err)
	}
	if err := json.Unmarshal(data, &st.s); err != nil {
		return nil, fmt.Errorf("settings file %s: %w", path, err)
	}
	return st, nil
}

// Get returns the current settings.
func (st *Store) Get() Settings {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.s
}

// Update changes the settings with f and writes them.
func (st *Store) Update(f func(*Settings)) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	f(&st.s)
	b, err := json.Marshal(st.s)
	if err != nil {
		return err
	}
	var known map[string]json.RawMessage
	if err := json.Unmarshal(b, &known); err != nil {
		return err
	}
	for _, k := range []string{"defaultProvider", "defaultModel", "defaultThinkingLevel", "steeringMode", "followUpMode", "compaction", "retry"} {
		if v, ok := known[k]; ok {
			st.raw[k] = mergeObject(st.raw[k], v)
		} else {
			delete(st.raw, k)
		}
	}
	out, err := json.MarshalIndent(st.raw, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(st.path), 0o700); err != nil {
		return fmt.Errorf("writing settings: %w", err)
	}
	// A temporary name of its own per write: two processes saving at once
	// must not rename each other's half-written file into place.
	if err := atomicfile.Write(st.path, append(out, '\n'), false); err != nil {
		return fmt.Errorf("writing settings: %w", err)
	}
	return nil
}

// mergeObject overlays the known keys of an object value on the old one,
// so nested keys agentd does not know (compaction.foo) survive.
func mergeObject(old, new json.RawMessage) json.RawMessage {
	var o, n map[string]json.RawMessage
	if json.Unmarshal(old, &o) != nil || json.Unmarshal(new, &n) != nil || o == nil {
		return new
	}
	for k, v := range n {
		o[k] = v
	}
	b, err := json.Marshal(o)
	if err != nil {
		return new
	}
	return b
}

// Bool reads an optional flag with a default.
func Bool(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

// Ptr returns a pointer to v, for setting optional fields.
func Ptr[T any](v T) *T { return &v }

// Package modes defines what a session's mode is: which tools the model
// may call, which of them wait for a person, whether the session may
// change anything, and what the system prompt says about it. There are
// two built-in modes, build (agentd's ordinary behaviour) and plan (look,
// do not touch: read-only tools, bash under the read-only sandbox, and
// the model proposes a plan), and any number more in Markdown files with
// frontmatter, in agentd's config directory (modes/*.md) and in a
// project (.agentd/modes/*.md).
//
// The package only describes modes; package session applies them, so
// every face switches a session's mode through one call.
package modes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/agentd-dev/agentd/internal/frontmatter"
)

// The built-in modes' names.
const (
	Build = "build"
	Plan  = "plan"
)

// Default is the mode of a session that never chose one.
const Default = Build

// Bounds on what a mode file may hold: a mode's prompt is a paragraph or
// a page, not a manual; a project with a hundred modes is a mistake.
const (
	MaxFileBytes = 32 << 10
	MaxModes     = 64
)

// ReadOnlyTools are the tools a read-only mode offers when its file does
// not list any: the ones that only look. bash is among them because a
// read-only mode runs it under the read-only sandbox (or not at all);
// task (a subagent, where the session has it) because the child of a
// session in a read-only mode is put in that mode and sandbox too, so an
// explorer can still be sent to look.
var ReadOnlyTools = []string{"read", "grep", "find", "ls", "bash", "task"}

// WriteTools are the tools a read-only mode never offers, whatever its
// tools say: they change files themselves, outside any sandbox's reach.
var WriteTools = []string{"write", "edit"}

// Mode is one mode.
type Mode struct {
	// Name is how clients name the mode (set_mode, session/set_mode).
	Name string `json:"name"`
	// Description says what the mode is for, in a line.
	Description string `json:"description,omitempty"`
	// Tools are globs over tool names: the tools the model may call in
	// this mode (ask_user and todo always). Nil is every tool the
	// session has (or ReadOnlyTools in a read-only mode).
	Tools []string `json:"tools,omitempty"`
	// ReadOnly makes the mode change nothing: write and edit are off,
	// and bash runs under the read-only sandbox, where a command that
	// writes a file fails (or bash is off where the kernel cannot
	// confine it).
	ReadOnly bool `json:"readOnly,omitempty"`
	// Ask are globs over tool names whose calls wait for a person's
	// approval in this mode, even where the policy allows them (a deny
	// rule still denies; grants still answer).
	Ask []string `json:"ask,omitempty"`
	// Prompt is added to the system prompt while the mode is active.
	Prompt string `json:"-"`
	// Source is where the mode comes from: "builtin", or its file.
	Source string `json:"source"`
}

// Builtin returns the built-in modes, build first.
func Builtin() []Mode {
	return []Mode{
		{Name: Build, Description: "Build: the agent reads, edits and runs commands to do the task", Source: "builtin"},
		{Name: Plan, Description: "Plan: read-only; the agent investigates and proposes a plan, changing nothing",
			ReadOnly: true, Source: "builtin",
			Prompt: "You are in plan mode. Investigate the task with the read-only tools (read, grep, find, ls, and bash, which runs in a read-only sandbox: a command that writes a file fails). " +
				"Do not try to change files or state, and do not look for ways around these limits. " +
				"End with a plan: the steps you would take, the files each touches, and the risks or open questions. " +
				"The user switches to build mode to have it carried out."},
	}
}

// Allows reports whether the mode lets the model call the tool named
// name.
func (m Mode) Allows(name string) bool {
	if name == "ask_user" || name == "todo" {
		return true
	}
	if m.ReadOnly && slices.Contains(WriteTools, name) {
		return false
	}
	tools := m.Tools
	if tools == nil {
		if !m.ReadOnly {
			return true
		}
		tools = ReadOnlyTools
	}
	return matchAny(tools, name)
}

// Asks reports whether the mode makes calls of the tool named name wait
// for a person.
func (m Mode) Asks(name string) bool { return matchAny(m.Ask, name) }

func matchAny(globs []string, name string) bool {
	for _, g := range globs {
		if ok, err := filepath.Match(g, name); err == nil && ok {
			return true
		}
	}
	return false
}

// PromptSection is what the system prompt says about the mode: its name,
// what it allows, and the mode's own instructions.
func (m Mode) PromptSection() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Mode: %s", m.Name)
	if m.Description != "" {
		fmt.Fprintf(&b, " (%s)", m.Description)
	}
	b.WriteString(".")
	if m.ReadOnly {
		b.WriteString(" This mode changes nothing: write and edit are not available and bash cannot write files.")
	}
	b.WriteString("\n")
	if p := strings.TrimSpace(m.Prompt); p != "" {
		b.WriteString(p + "\n")
	}
	return b.String()
}

// Set is the modes a session may switch between, built-in first, then
// the global files', then the project's, each group by name.
type Set struct {
	modes []Mode
	// Warnings say which files were skipped and why.
	Warnings []string
}

// Config says where mode files are looked for.
type Config struct {
	// GlobalDirs hold modes/*.md (agentd's config directory).
	GlobalDirs []string
	// ProjectDirs are names of directories under a session's cwd holding
	// modes/*.md (".agentd").
	ProjectDirs []string
}

// Load returns the built-in modes and those of the files cfg names for
// a session in cwd. A file that cannot be read or parsed, or that names
// a built-in mode, is skipped with a warning: a broken mode file never
// stops a session. A project mode of the same name as a global one takes
// its place.
func Load(cfg Config, cwd string) *Set {
	s := &Set{modes: Builtin()}
	var dirs []string
	for _, d := range cfg.GlobalDirs {
		if d != "" {
			dirs = append(dirs, filepath.Join(d, "modes"))
		}
	}
	if cwd != "" {
		for _, p := range cfg.ProjectDirs {
			dirs = append(dirs, filepath.Join(cwd, p, "modes"))
		}
	}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				s.Warnings = append(s.Warnings, fmt.Sprintf("%s: %v", dir, err))
			}
			continue
		}
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".md") {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		for _, n := range names {
			path := filepath.Join(dir, n)
			m, err := ReadFile(path)
			if err != nil {
				s.Warnings = append(s.Warnings, err.Error())
				continue
			}
			if err := s.add(m); err != nil {
				s.Warnings = append(s.Warnings, fmt.Sprintf("%s: %v", path, err))
			}
		}
	}
	return s
}

// New returns a Set of the built-in modes and more; for tests and
// callers with modes of their own.
func New(more ...Mode) (*Set, error) {
	s := &Set{modes: Builtin()}
	for _, m := range more {
		if err := s.add(m); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Set) add(m Mode) error {
	if err := checkName(m.Name); err != nil {
		return err
	}
	if m.Name == Build || m.Name == Plan {
		return fmt.Errorf("mode %q is built in and cannot be redefined; give the file another name", m.Name)
	}
	for i := range s.modes {
		if s.modes[i].Name == m.Name {
			s.modes[i] = m
			return nil
		}
	}
	if len(s.modes) >= MaxModes {
		return fmt.Errorf("more than %d modes; mode %q skipped", MaxModes, m.Name)
	}
	s.modes = append(s.modes, m)
	return nil
}

// All lists the modes.
func (s *Set) All() []Mode {
	if s == nil {
		return Builtin()
	}
	return slices.Clone(s.modes)
}

// Find returns the mode named name.
func (s *Set) Find(name string) (Mode, bool) {
	for _, m := range s.All() {
		if m.Name == name {
			return m, true
		}
	}
	return Mode{}, false
}

// Names lists the modes' names.
func (s *Set) Names() []string {
	all := s.All()
	out := make([]string, len(all))
	for i, m := range all {
		out[i] = m.Name
	}
	return out
}

// UnknownError refuses a mode that is not in the set, naming the ones
// that are.
func (s *Set) UnknownError(name string) error {
	// A client's text comes back to it, so no more of it than a name.
	if r := []rune(name); len(r) > 64 {
		name = string(r[:64]) + "…"
	}
	return fmt.Errorf("unknown mode %q; this session's modes are %s", name, strings.Join(s.Names(), ", "))
}

var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`) })

func checkName(name string) error {
	if !nameRE().MatchString(name) {
		return fmt.Errorf("mode name %q must be 1 to 64 lowercase letters, digits, '-' or '_', starting with a letter or digit", name)
	}
	return nil
}

// fields are what a mode file's frontmatter may say.
type fields struct {
	Name        string   `yaml:"name"`
	Description string   `yaml:"description"`
	Tools       []string `yaml:"tools"`
	ReadOnly    bool     `yaml:"readOnly"`
	Ask         []string `yaml:"ask"`
}

// ReadFile reads a mode from a Markdown file: YAML frontmatter between
// "---" lines (name, description, tools, readOnly, ask), then the text
// added to the system prompt. The name defaults to the file's name
// without ".md".
func ReadFile(path string) (Mode, error) {
	data, err := frontmatter.ReadFile(path, MaxFileBytes, false)
	if err != nil {
		return Mode{}, fmt.Errorf("%s: %w", path, err)
	}
	m, err := Parse(data)
	if err != nil {
		return Mode{}, fmt.Errorf("%s: %w", path, err)
	}
	if m.Name == "" {
		m.Name = strings.TrimSuffix(filepath.Base(path), ".md")
	}
	m.Source = path
	return m, nil
}

// Parse reads a mode from a mode file's bytes (see ReadFile); the name
// is left empty when the frontmatter gives none.
func Parse(data []byte) (Mode, error) {
	var fm fields
	head, body, _, err := frontmatter.Split(data)
	if err != nil {
		return Mode{}, err
	}
	if err := frontmatter.Decode(head, &fm, true); err != nil {
		return Mode{}, err
	}
	for _, g := range append(slices.Clone(fm.Tools), fm.Ask...) {
		if _, err := filepath.Match(g, ""); err != nil {
			return Mode{}, fmt.Errorf("tool pattern %q: %w", g, err)
		}
	}
	m := Mode{Name: fm.Name, Description: strings.TrimSpace(fm.Description), Tools: fm.Tools, ReadOnly: fm.ReadOnly,
		Ask: fm.Ask, Prompt: strings.TrimSpace(string(body))}
	if m.Tools != nil && len(m.Tools) == 0 {
		// "tools: []" means none besides ask_user and todo.
		m.Tools = []string{}
	}
	if m.Name != "" {
		if err := checkName(m.Name); err != nil {
			return Mode{}, err
		}
	}
	return m, nil
}

// Package subagent lets a session hand a self-contained job to a child
// session: the task tool, the agent types it offers (built in, or
// Markdown files with frontmatter in agentd's config directory and in a
// project's .agentd/agents, as opencode's agents are), and the rules that
// keep a child no wider than its parent: its tools are the type's and
// its parent's at once, its sandbox is its parent's or stricter, its
// depth and the number running at once are bounded. The child is a real
// session, built by whoever hosts sessions (engine.Engine, or the server,
// which lists it beside the others); this package only drives it.
package subagent

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"go.yaml.in/yaml/v4"

	"github.com/agentd-dev/agentd/internal/frontmatter"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

// Where a type comes from.
const (
	SourceBuiltin = "builtin"
	SourceGlobal  = "global"
	SourceProject = "project"
)

// MaxFileBytes bounds an agent file: a prompt, not a document.
const MaxFileBytes = 64 << 10

// Type is one kind of subagent the task tool can start.
type Type struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Tools are the tools a child of this type may have, nil for every
	// tool its parent has. A child gets only those its parent has too.
	Tools []string `json:"tools,omitempty"`
	// Model is "provider/id"; "" is the parent's current model.
	Model string `json:"model,omitempty"`
	// Sandbox is the mode the child's tools run in when it is stricter
	// than its parent's; "" is the parent's.
	Sandbox sandbox.Mode `json:"sandbox,omitempty"`
	// MaxTurns bounds the child's model requests (opencode's steps); 0
	// is the engine's bound.
	MaxTurns int `json:"maxTurns,omitempty"`
	// Prompt is added to the child's system prompt.
	Prompt string `json:"-"`
	Source string `json:"source"`
	Path   string `json:"path,omitempty"`
}

// ReadOnlyTools are the tools of the built-in explore type.
var ReadOnlyTools = []string{"read", "grep", "find", "ls"}

// Builtins are the types every session has unless a file replaces or
// disables them.
func Builtins() []*Type {
	return []*Type{
		{
			Name:        "explore",
			Description: "Read-only explorer: finds files, searches and reads code, and answers questions about the codebase. It cannot change files or run commands.",
			Tools:       slices.Clone(ReadOnlyTools),
			Sandbox:     sandbox.ReadOnly,
			Prompt: "You are an explorer working for another agent. Find what it asked for by reading and searching; change nothing. " +
				"End with a concise, self-contained answer: the facts found, with file paths and line numbers.",
			Source: SourceBuiltin,
		},
		{
			Name:        "general",
			Description: "General-purpose worker for multi-step tasks: research, edits and commands, with the tools the calling agent has.",
			Prompt: "You are a worker agent doing one task for another agent, which sees only your final message. " +
				"Do the task completely, check your work, then end with a concise report of what you did and found.",
			Source: SourceBuiltin,
		},
	}
}

// Warning is a file that was skipped or read leniently, and why.
type Warning struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (w Warning) String() string { return w.Path + ": " + w.Message }

// Catalog is the set of types a session offers, by name.
type Catalog struct {
	types    map[string]*Type
	Warnings []Warning
}

// NewCatalog makes a catalog of types; a later one replaces an earlier
// one of the same name.
func NewCatalog(types ...*Type) *Catalog {
	c := &Catalog{types: map[string]*Type{}}
	for _, t := range types {
		c.types[t.Name] = t
	}
	return c
}

// Get finds a type by name.
func (c *Catalog) Get(name string) (*Type, bool) {
	t, ok := c.types[name]
	return t, ok
}

// Types lists the types by name.
func (c *Catalog) Types() []*Type {
	out := make([]*Type, 0, len(c.types))
	for _, t := range c.types {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names lists the types' names, sorted.
func (c *Catalog) Names() []string {
	var out []string
	for _, t := range c.Types() {
		out = append(out, t.Name)
	}
	return out
}

// Load builds the catalog of a session in cwd: the built-in types, then
// the files of each global directory's agents/ (agentd's config dir),
// then those of .agentd/agents in every directory from the project's
// root (the nearest directory above cwd with .git, else cwd itself) down
// to cwd, so the nearer file wins. A file's type replaces one of the same
// name; `disable: true` removes it; `mode: primary` keeps it out (it is
// not a subagent). Files that cannot be used are skipped with a warning.
func Load(globalDirs []string, cwd string) *Catalog {
	c := NewCatalog(Builtins()...)
	for _, d := range globalDirs {
		if d != "" {
			c.loadDir(filepath.Join(d, "agents"), SourceGlobal)
		}
	}
	if cwd != "" {
		for _, d := range projectDirs(cwd) {
			c.loadDir(filepath.Join(d, ".agentd", "agents"), SourceProject)
		}
	}
	return c
}

// projectDirs are the directories from the project's root down to cwd.
func projectDirs(cwd string) []string {
	dir := filepath.Clean(cwd)
	var up []string
	for {
		up = append(up, dir)
		if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
			slices.Reverse(up)
			return up
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return []string{filepath.Clean(cwd)}
		}
		dir = parent
	}
}

// loadDir reads every *.md under dir (nested names become "team/x").
func (c *Catalog) loadDir(dir, source string) {
	var files []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // no such directory: nothing to load
		}
		if d.IsDir() {
			if p != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	for _, p := range files {
		rel, _ := filepath.Rel(dir, p)
		name := strings.TrimSuffix(filepath.ToSlash(rel), ".md")
		data, err := readAgentFile(p, source == SourceProject)
		if err != nil {
			c.Warnings = append(c.Warnings, Warning{Path: p, Message: err.Error()})
			continue
		}
		t, disabled, warns, err := Parse(name, data)
		for _, w := range warns {
			c.Warnings = append(c.Warnings, Warning{Path: p, Message: w})
		}
		if err != nil {
			c.Warnings = append(c.Warnings, Warning{Path: p, Message: err.Error()})
			continue
		}
		if disabled {
			delete(c.types, t.Name)
			continue
		}
		if t == nil {
			continue // a primary agent: not offered to the task tool
		}
		t.Source, t.Path = source, p
		c.types[t.Name] = t
	}
}

// readAgentFile reads an agent file, bounded. A project's file comes with
// the project (a cloned repository) and is read with agentd's rights,
// outside any sandbox, into a prompt the model sees: it must be a
// regular file itself, not a link to one elsewhere (a key file).
func readAgentFile(p string, project bool) ([]byte, error) {
	return frontmatter.ReadFile(p, MaxFileBytes, project)
}

var nameRe = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)*$`)
})

// fields are what an agent file's header may say: opencode's fields,
// plus sandbox.
type fields struct {
	Name        string    `yaml:"name"`
	Description string    `yaml:"description"`
	Mode        string    `yaml:"mode"`
	Model       string    `yaml:"model"`
	Tools       yaml.Node `yaml:"tools"`
	Permission  yaml.Node `yaml:"permission"`
	Permissions yaml.Node `yaml:"permissions"`
	Sandbox     string    `yaml:"sandbox"`
	Steps       int       `yaml:"steps"`
	MaxSteps    int       `yaml:"maxSteps"`
	Disable     bool      `yaml:"disable"`
	Disabled    bool      `yaml:"disabled"`
	Prompt      string    `yaml:"prompt"`
}

// Parse reads an agent file named name: YAML frontmatter between "---"
// lines, then the prompt. It returns nil for a primary-only agent,
// disabled for one that removes the type, and warnings for fields it
// read leniently. Tools may be a list, a comma-separated string, or
// opencode's map of tool to true/false (false removes it); a permission
// of "deny" for edit, bash or task removes those tools too, so a file
// written for opencode is never wider here than there.
func Parse(name string, data []byte) (t *Type, disabled bool, warnings []string, err error) {
	var fm fields
	head, body, _, err := frontmatter.Split(data)
	if err != nil {
		return nil, false, nil, err
	}
	if err := frontmatter.Decode(head, &fm, false); err != nil {
		return nil, false, nil, err
	}
	if fm.Name != "" {
		name = fm.Name
	}
	if !nameRe().MatchString(name) || len(name) > 64 {
		return nil, false, nil, fmt.Errorf("agent name %q: use letters, digits, '.', '_', '-' and '/' (at most 64)", name)
	}
	if fm.Disable || fm.Disabled {
		return &Type{Name: name}, true, nil, nil
	}
	switch fm.Mode {
	case "", "all", "subagent":
	case "primary":
		return nil, false, nil, nil
	default:
		warnings = append(warnings, fmt.Sprintf("unknown mode %q, read as all", fm.Mode))
	}
	t = &Type{Name: name, Description: strings.TrimSpace(fm.Description), Model: strings.TrimSpace(fm.Model)}
	if t.Description == "" {
		return nil, false, warnings, fmt.Errorf("agent %s has no description (the model chooses a type by it)", name)
	}
	if fm.Sandbox != "" {
		m, err := sandbox.ParseMode(fm.Sandbox)
		if err != nil {
			return nil, false, warnings, err
		}
		t.Sandbox = m
	}
	t.MaxTurns = fm.Steps
	if t.MaxTurns == 0 {
		t.MaxTurns = fm.MaxSteps
	}
	if t.MaxTurns < 0 {
		return nil, false, warnings, fmt.Errorf("steps must be positive, got %d", t.MaxTurns)
	}
	tools, all, drop, err := toolsField(&fm.Tools)
	if err != nil {
		return nil, false, warnings, err
	}
	if !all {
		t.Tools = tools
	}
	drop = append(drop, denied(&fm.Permission, &fm.Permissions)...)
	slices.Sort(drop)
	drop = slices.Compact(drop)
	if len(drop) > 0 {
		if t.Tools == nil {
			t.Tools = []string{"*"} // every tool the parent has, but these
		}
		t.Tools = slices.DeleteFunc(t.Tools, func(n string) bool { return slices.Contains(drop, n) })
		for _, d := range drop {
			t.Tools = append(t.Tools, "!"+d)
		}
	}
	t.Prompt = strings.TrimSpace(string(body))
	if t.Prompt == "" {
		t.Prompt = strings.TrimSpace(fm.Prompt)
	}
	return t, false, warnings, nil
}

// toolsField reads tools: a list or a comma-separated string names the
// tools allowed; a map of name to bool allows every tool but those set
// false (opencode's form). all means the field allows every tool.
func toolsField(n *yaml.Node) (names []string, all bool, drop []string, err error) {
	switch n.Kind {
	case 0:
		return nil, true, nil, nil
	case yaml.ScalarNode:
		for _, s := range strings.Split(n.Value, ",") {
			if s = strings.TrimSpace(s); s != "" {
				names = append(names, s)
			}
		}
		if slices.Contains(names, "*") {
			return nil, true, nil, nil
		}
		return nonNil(names), false, nil, nil
	case yaml.SequenceNode:
		if err := n.Decode(&names); err != nil {
			return nil, false, nil, fmt.Errorf("tools: %v", err)
		}
		if slices.Contains(names, "*") {
			return nil, true, nil, nil
		}
		return nonNil(names), false, nil, nil
	case yaml.MappingNode:
		var m map[string]bool
		if err := n.Decode(&m); err != nil {
			return nil, false, nil, fmt.Errorf("tools: a map of tool names to true or false: %v", err)
		}
		for k, on := range m {
			if !on {
				drop = append(drop, opencodeTools(k)...)
			}
		}
		sort.Strings(drop)
		return nil, true, drop, nil
	}
	return nil, false, nil, fmt.Errorf("tools: a list of tool names")
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// opencodeTools maps a tool or permission name of opencode's to agentd's
// tools it covers.
func opencodeTools(k string) []string {
	switch k {
	case "edit":
		return []string{"edit", "write"}
	case "shell":
		return []string{"bash"}
	case "glob":
		return []string{"find"}
	case "list":
		return []string{"ls"}
	}
	return []string{k}
}

// denied are the tools a permission field denies outright: opencode's
// map form (edit: deny, bash: deny, task: deny) and its list form
// ({action, resource: "*", effect: deny}). Finer rules (patterns, ask)
// are left to the session's own policy, which the child shares.
func denied(perm, perms *yaml.Node) []string {
	var out []string
	if perm.Kind == yaml.MappingNode {
		var m map[string]any
		if perm.Decode(&m) == nil {
			for k, v := range m {
				if s, ok := v.(string); ok && s == "deny" {
					out = append(out, opencodeTools(k)...)
				}
				if sub, ok := v.(map[string]any); ok && sub["*"] == "deny" && len(sub) == 1 {
					out = append(out, opencodeTools(k)...)
				}
			}
		}
	}
	if perms.Kind == yaml.SequenceNode {
		var rules []struct{ Action, Resource, Effect string }
		if perms.Decode(&rules) == nil {
			for _, r := range rules {
				if r.Effect == "deny" && (r.Resource == "*" || r.Resource == "") {
					out = append(out, opencodeTools(r.Action)...)
				}
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// Allowed are the tools a child of t gets when its parent may call
// parent: those of the type that the parent has ("*" standing for all
// the parent has, "!name" removing one). A type can never add a tool.
func (t *Type) Allowed(parent []string) []string {
	if t.Tools == nil {
		return slices.Clone(parent)
	}
	var want []string
	var drop []string
	for _, n := range t.Tools {
		switch {
		case n == "*":
			want = append(want, parent...)
		case strings.HasPrefix(n, "!"):
			drop = append(drop, n[1:])
		default:
			want = append(want, n)
		}
	}
	out := []string{}
	for _, n := range parent {
		if slices.Contains(want, n) && !slices.Contains(drop, n) {
			out = append(out, n)
		}
	}
	return out
}

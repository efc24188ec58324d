// Package commands is what a prompt that starts with "/" can mean, for
// every face at once: prompt templates (Markdown files in prompts/
// directories, expanded with their arguments), skills (the Agent Skills
// standard: SKILL.md directories, listed in the system prompt and
// loaded with the read tool or by /skill:name) and built-in commands
// (/help, /compact, /model, /fork, and any another package registers).
// A session gets a Catalog when the engine makes it; the session
// expands templates and skill commands in every prompt it is given,
// and the faces only translate the listing (pi's get_commands and
// get_skills, REST, ACP's available_commands_update) and a built-in's
// output.
package commands

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/session"
)

// Sources of a command, as pi's get_commands names them.
const (
	SourcePrompt  = "prompt"
	SourceSkill   = "skill"
	SourceBuiltin = "builtin"
)

// Locations of a template or skill.
const (
	LocationUser    = "user"
	LocationProject = "project"
)

// skillPrefix introduces a skill command: /skill:name args.
const skillPrefix = "skill:"

// Config says where skills and prompt templates are found.
type Config struct {
	// GlobalDirs are agentd's config directory and pi's (~/.pi/agent):
	// the skills/ and prompts/ directories under each are global.
	GlobalDirs []string
	// UserSkillDirs are more global skill directories (~/.agents/skills,
	// the standard's shared place).
	UserSkillDirs []string
	// ProjectDirs name the project's own directories (".agentd", ".pi"):
	// prompts/ and skills/ under each in the session's cwd.
	ProjectDirs []string
	// ProjectSkillDirs are more relative skill directories looked for in
	// cwd and up to the git root (".agents/skills").
	ProjectSkillDirs []string
	// NoSkills and NoTemplates turn discovery off (pi's --no-skills,
	// --no-prompt-templates).
	NoSkills    bool
	NoTemplates bool
}

// Catalog is what "/name" can mean in one session: its templates and
// skills as found when the session was made, and the built-ins.
type Catalog struct {
	skills    []Skill
	templates []Template
	builtins  *Registry
	warnings  []Warning
	grants    []string
}

// Load finds the skills and templates of a session in cwd. Problems with
// single files are warnings (Warnings), never errors: a broken skill
// must not keep a session from starting.
func Load(c Config, cwd string, builtins *Registry) *Catalog {
	if builtins == nil {
		builtins = NewRegistry()
	}
	cat := &Catalog{builtins: builtins}
	warn := func(w Warning) { cat.warnings = append(cat.warnings, w) }
	cwd = filepath.Clean(cwd)
	if !c.NoSkills {
		// pi's order, which decides name collisions (the first found
		// wins): the project's directories, then the global ones.
		// Markdown files directly in a skills directory are skills only
		// in agentd's and pi's own skills directories, not in the
		// standard's .agents/skills.
		type skillDir struct {
			path, loc string
			rootFiles bool
		}
		var dirs []skillDir
		ups := upToGitRoot(cwd)
		// A project's skills may only be granted (see ReadGrants) within
		// the project: the top directory they are looked for in.
		top, err := filepath.EvalSymlinks(ups[len(ups)-1])
		if err != nil {
			top = ups[len(ups)-1]
		}
		for _, p := range c.ProjectDirs {
			dirs = append(dirs, skillDir{filepath.Join(cwd, p, "skills"), LocationProject, true})
		}
		for _, dir := range ups {
			for _, p := range c.ProjectSkillDirs {
				dirs = append(dirs, skillDir{filepath.Join(dir, p), LocationProject, false})
			}
		}
		for _, d := range c.GlobalDirs {
			if d != "" {
				dirs = append(dirs, skillDir{filepath.Join(d, "skills"), LocationUser, true})
			}
		}
		for _, d := range c.UserSkillDirs {
			if d != "" {
				dirs = append(dirs, skillDir{d, LocationUser, false})
			}
		}
		seenReal := map[string]bool{}
		seenDir := map[string]bool{}
		byName := map[string]string{}
		for _, d := range dirs {
			real, err := filepath.EvalSymlinks(d.path)
			if err != nil || seenDir[real] {
				continue
			}
			seenDir[real] = true
			for _, s := range skillsIn(d.path, d.loc, d.rootFiles, warn) {
				rp, err := filepath.EvalSymlinks(s.FilePath)
				if err != nil {
					rp = s.FilePath
				}
				if seenReal[rp] {
					continue
				}
				if first, ok := byName[s.Name]; ok {
					warn(Warning{Path: s.FilePath, Message: fmt.Sprintf("skill name %q is taken by %s; this one is not loaded", s.Name, first)})
					continue
				}
				seenReal[rp] = true
				byName[s.Name] = s.FilePath
				cat.skills = append(cat.skills, s)
				cat.grants = append(cat.grants, grant(s, rp, top)...)
			}
		}
	}
	if !c.NoTemplates {
		// The project's first, as pi: its template wins a name.
		var dirs []struct{ path, loc string }
		for _, p := range c.ProjectDirs {
			dirs = append(dirs, struct{ path, loc string }{filepath.Join(cwd, p, "prompts"), LocationProject})
		}
		for _, d := range c.GlobalDirs {
			if d != "" {
				dirs = append(dirs, struct{ path, loc string }{filepath.Join(d, "prompts"), LocationUser})
			}
		}
		byName := map[string]string{}
		seenDir := map[string]bool{}
		for _, d := range dirs {
			real, err := filepath.EvalSymlinks(d.path)
			if err != nil || seenDir[real] {
				continue
			}
			seenDir[real] = true
			for _, t := range templatesIn(d.path, d.loc, warn) {
				if first, ok := byName[t.Name]; ok {
					warn(Warning{Path: t.Path, Message: fmt.Sprintf("template name %q is taken by %s; this one is not loaded", t.Name, first)})
					continue
				}
				if _, ok := builtins.Get(t.Name); ok {
					warn(Warning{Path: t.Path, Message: fmt.Sprintf("/%s is a built-in command; this template is not loaded", t.Name)})
					continue
				}
				byName[t.Name] = t.Path
				cat.templates = append(cat.templates, t)
			}
		}
	}
	return cat
}

// upToGitRoot is cwd and every directory above it up to the nearest one
// holding .git (the repository's root), or to / when there is none.
func upToGitRoot(cwd string) []string {
	var out []string
	for dir := cwd; ; {
		out = append(out, dir)
		if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
			return out
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			// No repository: pi then looks all the way up, as here.
			return out
		}
		dir = parent
	}
}

// Skills are the session's skills, in the order they were found.
func (c *Catalog) Skills() []Skill {
	if c == nil {
		return nil
	}
	return slices.Clone(c.skills)
}

// Templates are the session's prompt templates.
func (c *Catalog) Templates() []Template {
	if c == nil {
		return nil
	}
	return slices.Clone(c.templates)
}

// Warnings say what was wrong with the files found.
func (c *Catalog) Warnings() []Warning {
	if c == nil {
		return nil
	}
	return slices.Clone(c.warnings)
}

// Builtins are the built-in commands.
func (c *Catalog) Builtins() []Builtin {
	if c == nil {
		return nil
	}
	return c.builtins.All()
}

// ReadGrants are the real paths (links resolved) of the skills' own
// files and directories: the file tools may read them in every sandbox
// mode, since reading them is what the system prompt tells the model to
// do, even where they live in a directory the sandbox hides (agentd's
// config directory). A skill that is a SKILL.md grants its directory; a
// Markdown file directly in a skills directory grants only itself (its
// directory is the skills directory, which may hold anything). A
// project's skill grants nothing outside the project, so a link in a
// cloned repository cannot open a hidden directory to the model.
func (c *Catalog) ReadGrants() []string {
	if c == nil {
		return nil
	}
	return slices.Clone(c.grants)
}

// grant is what skill s (whose file is really at real) lets the file
// tools read; top is the project's top directory.
func grant(s Skill, real, top string) []string {
	g := filepath.Dir(real)
	if s.root {
		g = real
	}
	if s.Location == LocationProject && !within(g, top) {
		return nil
	}
	return []string{g}
}

func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// PromptSection is the skills part of the session's system prompt.
func (c *Catalog) PromptSection() string {
	if c == nil {
		return ""
	}
	return PromptSection(c.skills)
}

// Command is one entry of a listing, in pi's get_commands shape (with
// the file's location and path besides).
type Command struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Source is "prompt", "skill" or "builtin".
	Source string `json:"source"`
	// Location is "user" or "project" for a template or skill.
	Location string `json:"location,omitempty"`
	Path     string `json:"path,omitempty"`
	// ArgumentHint says what arguments the command takes.
	ArgumentHint string `json:"argumentHint,omitempty"`
	// SourceInfo is pi's description of where a command comes from.
	SourceInfo *SourceInfo `json:"sourceInfo,omitempty"`
}

// SourceInfo is pi's sourceInfo of a command: the file, and its scope
// ("user" or "project").
type SourceInfo struct {
	Path   string `json:"path"`
	Source string `json:"source"`
	Scope  string `json:"scope"`
	Origin string `json:"origin"`
}

func sourceInfo(path, location string) *SourceInfo {
	return &SourceInfo{Path: path, Source: "local", Scope: location, Origin: "top-level"}
}

// List is every command a prompt can start with: built-ins, then
// templates, then skills (as /skill:name).
func (c *Catalog) List() []Command {
	if c == nil {
		return []Command{}
	}
	out := []Command{}
	for _, b := range c.builtins.All() {
		// pi's clients expect a sourceInfo on every command.
		out = append(out, Command{Name: b.Name, Description: b.Description, Source: SourceBuiltin, ArgumentHint: b.ArgumentHint,
			SourceInfo: &SourceInfo{Source: "agentd", Scope: "temporary", Origin: "top-level"}})
	}
	for _, t := range c.templates {
		out = append(out, Command{Name: t.Name, Description: t.Description, Source: SourcePrompt, Location: t.Location, Path: t.Path, ArgumentHint: t.ArgumentHint,
			SourceInfo: sourceInfo(t.Path, t.Location)})
	}
	for _, s := range c.skills {
		out = append(out, Command{Name: skillPrefix + s.Name, Description: s.Description, Source: SourceSkill, Location: s.Location, Path: s.FilePath,
			SourceInfo: sourceInfo(s.FilePath, s.Location)})
	}
	return out
}

// Split parses "/name args" into name and args; ok is false when text
// does not start with "/" and a name.
func Split(text string) (name, args string, ok bool) { return split(text) }

func split(text string) (name, args string, ok bool) {
	if !strings.HasPrefix(text, "/") {
		return "", "", false
	}
	rest := text[1:]
	i := strings.IndexAny(rest, " \t\n")
	if i < 0 {
		name = rest
	} else {
		name, args = rest[:i], strings.TrimLeft(rest[i+1:], " \t")
	}
	return name, args, name != ""
}

// Expand returns what a prompt's text stands for when it starts with a
// template's name (its body with the arguments put in) or with
// /skill:name (the skill's body, then the arguments). Any other text
// comes back as it is, with false. A skill whose file cannot be read
// any more is an error the client sees.
func (c *Catalog) Expand(text string) (string, bool, error) {
	if c == nil {
		return text, false, nil
	}
	name, args, ok := split(text)
	if !ok {
		return text, false, nil
	}
	if sk, isSkill := strings.CutPrefix(name, skillPrefix); isSkill {
		for _, s := range c.skills {
			if s.Name == sk {
				out, err := skillBlock(s, args)
				if err != nil {
					return "", false, fault.Errorf(fault.Unavailable, "skill %s could not be read: %v", s.Name, err)
				}
				return out, true, nil
			}
		}
		return text, false, nil
	}
	for _, t := range c.templates {
		if t.Name == name {
			return Substitute(t.Body, SplitArgs(args)), true, nil
		}
	}
	return text, false, nil
}

// IsBuiltin reports whether text starts with a built-in command.
func (c *Catalog) IsBuiltin(text string) bool {
	if c == nil {
		return false
	}
	name, _, ok := split(text)
	if !ok {
		return false
	}
	_, ok = c.builtins.Get(name)
	return ok
}

// Run runs the built-in command text starts with, if any, for session s
// and returns what it has to say; ok is false when text names no
// built-in (it is then a prompt like any other).
func (c *Catalog) Run(ctx context.Context, s *session.Session, text string) (string, bool, error) {
	out, _, ok, err := c.RunDetail(ctx, s, text)
	return out, ok, err
}

// RunDetail is Run that also returns the structured result the command
// gave (Call.Detail), or nil.
func (c *Catalog) RunDetail(ctx context.Context, s *session.Session, text string) (out string, detail any, ok bool, err error) {
	if c == nil {
		return "", nil, false, nil
	}
	name, args, ok := split(text)
	if !ok {
		return "", nil, false, nil
	}
	b, ok := c.builtins.Get(name)
	if !ok {
		return "", nil, false, nil
	}
	out, err = b.Run(ctx, Call{Session: s, Args: args, Catalog: c, detail: &detail})
	return out, detail, true, err
}

// Of is the catalog of a session the engine made, or nil.
func Of(s *session.Session) *Catalog {
	c, _ := s.Slash().(*Catalog)
	return c
}

package commands

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/agentd-dev/agentd/internal/frontmatter"
)

// Bounds of the Agent Skills specification (agentskills.io).
const (
	maxSkillName        = 64
	maxSkillDescription = 1024
	maxCompatibility    = 500
)

// maxSkillFile bounds what is read of one SKILL.md or template: they
// are instructions, a page or a few; anything far larger is not meant
// for a prompt.
const maxSkillFile = 256 << 10

// maxWalk bounds how many directory entries one skills directory's walk
// looks at, so a skills directory that leads into a huge tree (a link to
// $HOME) cannot stall a session's creation.
const maxWalk = 10000

// skillFields are the frontmatter fields the specification defines;
// others draw a warning and are ignored.
var skillFields = map[string]bool{
	"name": true, "description": true, "license": true, "compatibility": true,
	"metadata": true, "allowed-tools": true, "disable-model-invocation": true,
}

var skillNameChars = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9-]+$`) })

// Skill is one skill: a SKILL.md (or a Markdown file directly in a
// skills directory) and the directory it lives in.
type Skill struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// FilePath is the SKILL.md; BaseDir the directory its relative
	// paths are resolved from, and whose files the read tool may read
	// whatever the sandbox hides.
	FilePath string `json:"filePath"`
	BaseDir  string `json:"baseDir"`
	// Location is "user" for a global skill, "project" for one of the
	// session's project.
	Location string `json:"source"`
	// DisableModelInvocation keeps the skill out of the system prompt:
	// only /skill:name loads it.
	DisableModelInvocation bool `json:"disableModelInvocation"`
	// root: a Markdown file directly in a skills directory, with no
	// directory of its own.
	root bool
}

// Warning is something wrong with a skill or template file that did not
// (or, when the file was skipped, did) stop it loading.
type Warning struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (w Warning) String() string { return w.Path + ": " + w.Message }

// skillsIn finds the skills of one skills directory as pi 0.73 does: a
// directory holding a SKILL.md is one skill (nothing under it is looked
// at); other directories are searched at any depth (hidden ones and
// node_modules skipped); Markdown files directly in the skills
// directory are skills of their own when rootFiles is set.
func skillsIn(dir, location string, rootFiles bool, warn func(Warning)) []Skill {
	var out []Skill
	seen := 0
	var walk func(d string, root bool, depth int)
	walk = func(d string, root bool, depth int) {
		if depth > 8 {
			return
		}
		if fi, err := os.Stat(filepath.Join(d, "SKILL.md")); err == nil && fi.Mode().IsRegular() {
			if s, ok := loadSkill(filepath.Join(d, "SKILL.md"), false, location, warn); ok {
				out = append(out, s)
			}
			return
		}
		entries, err := os.ReadDir(d)
		if err != nil {
			return
		}
		for _, e := range entries {
			if seen++; seen > maxWalk {
				if seen == maxWalk+1 {
					warn(Warning{Path: dir, Message: fmt.Sprintf("more than %d entries; the rest are not searched for skills", maxWalk)})
				}
				return
			}
			name := e.Name()
			if strings.HasPrefix(name, ".") || name == "node_modules" {
				continue
			}
			p := filepath.Join(d, name)
			fi, err := os.Stat(p) // links followed, as pi does
			if err != nil {
				continue
			}
			if fi.IsDir() {
				walk(p, false, depth+1)
				continue
			}
			if root && rootFiles && fi.Mode().IsRegular() && strings.HasSuffix(name, ".md") {
				if s, ok := loadSkill(p, true, location, warn); ok {
					out = append(out, s)
				}
			}
		}
	}
	walk(dir, true, 0)
	return out
}

// loadSkill reads one skill file and checks its frontmatter against the
// specification: every problem is a warning, and only a skill with no
// description is left out (the model could not know when to use it).
func loadSkill(path string, rootFile bool, location string, warn func(Warning)) (Skill, bool) {
	text, err := readBounded(path)
	if err != nil {
		warn(Warning{Path: path, Message: err.Error()})
		return Skill{}, false
	}
	fields, _, err := splitFrontmatter(text)
	if err != nil {
		warn(Warning{Path: path, Message: err.Error()})
		return Skill{}, false
	}
	for k := range fields {
		if !skillFields[k] {
			warn(Warning{Path: path, Message: fmt.Sprintf("unknown frontmatter field %q", k)})
		}
	}
	dir := filepath.Dir(path)
	parent := filepath.Base(dir)
	if rootFile {
		// A file directly in a skills directory has no directory of its
		// own: its name stands in for one.
		parent = strings.TrimSuffix(filepath.Base(path), ".md")
	}
	name, _ := str(fields, "name")
	name = strings.TrimSpace(name)
	if name == "" {
		name = parent
	}
	for _, m := range nameProblems(name, parent) {
		warn(Warning{Path: path, Message: m})
	}
	desc, _ := str(fields, "description")
	if strings.TrimSpace(desc) == "" {
		warn(Warning{Path: path, Message: "description is required; the skill is not loaded"})
		return Skill{}, false
	}
	if n := len([]rune(desc)); n > maxSkillDescription {
		warn(Warning{Path: path, Message: fmt.Sprintf("description exceeds %d characters (%d)", maxSkillDescription, n)})
	}
	if c, ok := str(fields, "compatibility"); ok && len([]rune(c)) > maxCompatibility {
		warn(Warning{Path: path, Message: fmt.Sprintf("compatibility exceeds %d characters", maxCompatibility)})
	}
	if v, ok := fields["metadata"]; ok && v != nil {
		if _, isMap := v.(map[string]any); !isMap {
			warn(Warning{Path: path, Message: "metadata must be a mapping"})
		}
	}
	return Skill{Name: name, Description: desc, FilePath: path, BaseDir: dir, Location: location,
		DisableModelInvocation: boolean(fields, "disable-model-invocation"), root: rootFile}, true
}

// nameProblems are the ways name breaks the specification's rules.
func nameProblems(name, parent string) []string {
	var out []string
	if name != parent {
		out = append(out, fmt.Sprintf("name %q does not match parent directory %q", name, parent))
	}
	if n := len([]rune(name)); n > maxSkillName {
		out = append(out, fmt.Sprintf("name exceeds %d characters (%d)", maxSkillName, n))
	}
	if !skillNameChars().MatchString(name) {
		out = append(out, "name contains invalid characters (must be lowercase a-z, 0-9, hyphens only)")
	}
	if strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-") {
		out = append(out, "name must not start or end with a hyphen")
	}
	if strings.Contains(name, "--") {
		out = append(out, "name must not contain consecutive hyphens")
	}
	return out
}

// PromptSection is the skills part of a system prompt in the format the
// Agent Skills integration guide gives (an <available_skills> list of
// name, description and location), with pi's lead-in; skills that only
// /skill:name may load are left out. Empty when there are none.
func PromptSection(skills []Skill) string {
	var b strings.Builder
	for _, s := range skills {
		if s.DisableModelInvocation {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("The following skills provide specialized instructions for specific tasks.\n")
			b.WriteString("Use the read tool to load a skill's file when the task matches its description.\n")
			b.WriteString("When a skill file references a relative path, resolve it against the skill directory (parent of SKILL.md / dirname of the path) and use that absolute path in tool commands.\n\n")
			b.WriteString("<available_skills>\n")
		}
		b.WriteString("  <skill>\n")
		b.WriteString("    <name>" + escapeXML(s.Name) + "</name>\n")
		b.WriteString("    <description>" + escapeXML(s.Description) + "</description>\n")
		b.WriteString("    <location>" + escapeXML(s.FilePath) + "</location>\n")
		b.WriteString("  </skill>\n")
	}
	if b.Len() == 0 {
		return ""
	}
	b.WriteString("</available_skills>")
	return b.String()
}

var xmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")

func escapeXML(s string) string { return xmlEscaper.Replace(s) }

// skillBlock is what /skill:name [args] sends the model: the skill's
// body in a <skill> element naming it and where it lives, then the
// arguments, as pi does.
func skillBlock(s Skill, args string) (string, error) {
	text, err := readBounded(s.FilePath)
	if err != nil {
		return "", err
	}
	_, body, _ := splitFrontmatter(text)
	block := fmt.Sprintf("<skill name=%q location=%q>\nReferences are relative to %s.\n\n%s\n</skill>",
		s.Name, s.FilePath, s.BaseDir, strings.TrimSpace(body))
	if args = strings.TrimSpace(args); args != "" {
		block += "\n\n" + args
	}
	return block, nil
}

// readBounded reads a regular file of at most maxSkillFile bytes.
func readBounded(path string) (string, error) {
	b, err := frontmatter.ReadFile(path, maxSkillFile, false)
	return string(b), err
}

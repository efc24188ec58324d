// Package instructions builds a session's system prompt from the files
// people keep their instructions in: AGENTS.md (or CLAUDE.md) from the
// global config directories and from every directory from the filesystem
// root down to the session's cwd, SYSTEM.md replacing agentd's own
// prompt and APPEND_SYSTEM.md adding to it. It follows pi's rules (so a
// pi user's files work unchanged) and bounds what it reads. Every face
// reports the Files a prompt was built from; none of them reads a file
// itself.
package instructions

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"
)

// Default bounds: an AGENTS.md is a page or a few of conventions; a file
// past 64 KiB is most likely not meant for the prompt, and 256 KiB in
// all (about 64k tokens) already costs a large share of a model's
// context on every request.
const (
	DefaultMaxFileBytes  = 64 << 10
	DefaultMaxTotalBytes = 256 << 10
)

// Kinds of files a prompt is built from.
const (
	KindContext = "context" // AGENTS.md or CLAUDE.md
	KindSystem  = "system"  // SYSTEM.md: replaces agentd's own prompt
	KindAppend  = "append"  // APPEND_SYSTEM.md: added to the prompt
)

// contextNames are tried in this order in each directory; the first that
// is a readable regular file is the directory's context file (pi's
// order: CLAUDE.md only where there is no AGENTS.md).
var contextNames = []string{"AGENTS.md", "AGENTS.MD", "CLAUDE.md", "CLAUDE.MD"}

// Config says where instruction files are looked for.
type Config struct {
	// GlobalDirs are searched in order: agentd's config directory, then
	// pi's (~/.pi/agent). Each one's AGENTS.md is loaded; the first
	// SYSTEM.md and APPEND_SYSTEM.md found (after the project's) is used.
	GlobalDirs []string
	// ProjectDirs are the names of the directories under the session's
	// cwd holding its SYSTEM.md and APPEND_SYSTEM.md, in order of
	// precedence (".agentd", ".pi").
	ProjectDirs []string
	// NoContextFiles loads no AGENTS.md or CLAUDE.md (pi's
	// --no-context-files); SYSTEM.md and APPEND_SYSTEM.md still apply,
	// as in pi.
	NoContextFiles bool
	// MaxFileBytes and MaxTotalBytes bound what is read of one file and
	// of all of them; zero takes the defaults.
	MaxFileBytes  int
	MaxTotalBytes int
}

// File is one file that went into a prompt.
type File struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
	// Bytes is the file's size; Included how much of it is in the
	// prompt, less than Bytes when Truncated.
	Bytes     int64 `json:"bytes"`
	Included  int   `json:"included"`
	Truncated bool  `json:"truncated,omitempty"`
}

// Prompt is a built system prompt and the files it was built from, in
// the order they appear in it.
type Prompt struct {
	Text  string
	Files []File
}

// found is a file chosen before the budget is applied.
type found struct {
	path string
	kind string
	size int64
}

// Build makes the system prompt of a session in cwd: base (agentd's own
// prompt) or SYSTEM.md in its place, APPEND_SYSTEM.md, then the context
// files under a "Project Context" heading, each headed by its path,
// global first, then from the root-most directory down to cwd; footer
// (working directory, date) comes last.
func Build(c Config, cwd, base, footer string) Prompt {
	maxFile, maxTotal := c.MaxFileBytes, c.MaxTotalBytes
	if maxFile <= 0 {
		maxFile = DefaultMaxFileBytes
	}
	if maxTotal <= 0 {
		maxTotal = DefaultMaxTotalBytes
	}
	var picked []found
	if f, ok := first(c, cwd, "SYSTEM.md"); ok {
		f.kind = KindSystem
		picked = append(picked, f)
	}
	if f, ok := first(c, cwd, "APPEND_SYSTEM.md"); ok {
		f.kind = KindAppend
		picked = append(picked, f)
	}
	if !c.NoContextFiles {
		picked = append(picked, contextFiles(c.GlobalDirs, cwd)...)
	}

	// The budget goes first to SYSTEM.md and APPEND_SYSTEM.md, then to the
	// context files nearest cwd (the most specific), the global ones last;
	// the prompt still shows them root-most first.
	order := make([]int, 0, len(picked))
	for i, f := range picked {
		if f.kind != KindContext {
			order = append(order, i)
		}
	}
	for i := len(picked) - 1; i >= 0; i-- {
		if picked[i].kind == KindContext {
			order = append(order, i)
		}
	}
	texts := make([]string, len(picked))
	files := make([]File, len(picked))
	left := maxTotal
	for _, i := range order {
		f := picked[i]
		limit := min(maxFile, left)
		text, size, err := read(f.path, limit)
		if err != nil {
			// Gone or unreadable since it was found: say so in the prompt
			// rather than leave the model (and the person) guessing.
			files[i] = File{Path: f.path, Kind: f.kind, Bytes: f.size, Truncated: true}
			texts[i] = fmt.Sprintf("[agentd: this file could not be read: %v]", err)
			continue
		}
		n := len(text)
		left -= n
		files[i] = File{Path: f.path, Kind: f.kind, Bytes: size, Included: n, Truncated: int64(n) < size}
		if files[i].Truncated {
			why := fmt.Sprintf("the limit per file is %d bytes", maxFile)
			if limit < maxFile {
				why = fmt.Sprintf("the limit for all instruction files together is %d bytes", maxTotal)
			}
			if text != "" {
				text += "\n"
			}
			text += fmt.Sprintf("[agentd: %s is %d bytes; only the first %d are included (%s)]", f.path, size, n, why)
		}
		texts[i] = text
	}

	var b strings.Builder
	prompt := base
	for i, f := range picked {
		if f.kind == KindSystem {
			prompt = texts[i]
		}
	}
	b.WriteString(strings.TrimRight(prompt, "\n"))
	for i, f := range picked {
		if f.kind == KindAppend {
			b.WriteString("\n\n" + strings.TrimRight(texts[i], "\n"))
		}
	}
	heading := false
	for i, f := range picked {
		if f.kind != KindContext {
			continue
		}
		if !heading {
			b.WriteString("\n\n# Project Context\n\nProject-specific instructions and guidelines:\n")
			heading = true
		}
		b.WriteString("\n## " + f.path + "\n\n" + strings.TrimRight(texts[i], "\n") + "\n")
	}
	if footer != "" {
		b.WriteString("\n\n" + footer)
	}
	return Prompt{Text: b.String(), Files: files}
}

// first is the first SYSTEM.md or APPEND_SYSTEM.md (name) in the
// project's directories, then in the global ones (pi: .pi/ under cwd,
// then ~/.pi/agent/).
func first(c Config, cwd, name string) (found, bool) {
	var dirs []string
	for _, d := range c.ProjectDirs {
		dirs = append(dirs, filepath.Join(cwd, d))
	}
	dirs = append(dirs, c.GlobalDirs...)
	for i, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if size, ok := regular(p, i < len(c.ProjectDirs)); ok {
			return found{path: p, size: size}, true
		}
	}
	return found{}, false
}

// contextFiles are the context files of the global directories, then of
// every directory from the filesystem root down to cwd (pi walks to the
// root, not to the git root: instructions kept above a repository, for
// all of a person's projects, apply too). A file is loaded once even if
// two of these directories are the same.
func contextFiles(global []string, cwd string) []found {
	seen := map[string]bool{}
	var out []found
	add := func(dir string, project bool) (found, bool) {
		for _, n := range contextNames {
			p := filepath.Join(dir, n)
			if size, ok := regular(p, project); ok {
				if seen[p] {
					return found{}, false
				}
				seen[p] = true
				return found{path: p, kind: KindContext, size: size}, true
			}
		}
		return found{}, false
	}
	for _, d := range global {
		if d == "" {
			continue
		}
		if f, ok := add(filepath.Clean(d), false); ok {
			out = append(out, f)
		}
	}
	var up []found
	dir := filepath.Clean(cwd)
	for {
		if f, ok := add(dir, true); ok {
			up = append(up, f)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	for i := len(up) - 1; i >= 0; i-- {
		out = append(out, up[i])
	}
	return out
}

// regular reports whether p is a regular file (after symlinks) and its
// size. On a case-insensitive file system AGENTS.md and AGENTS.MD are one
// file: the first name found is used, once.
//
// A project's files come with the project (a cloned repository), and
// agentd reads them with its own rights, outside any sandbox: a symlink
// there is followed only to another Markdown file (CLAUDE.md ->
// AGENTS.md), never to, say, a key file the model should not see.
func regular(p string, project bool) (int64, bool) {
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return 0, false
	}
	if project {
		if li, err := os.Lstat(p); err != nil {
			return 0, false
		} else if li.Mode()&os.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(p)
			if err != nil || !strings.EqualFold(filepath.Ext(target), ".md") {
				return 0, false
			}
		}
	}
	return fi.Size(), true
}

// read reads at most limit bytes of p, cut back to whole UTF-8
// characters, and its size.
func read(p string, limit int) (string, int64, error) {
	// O_NONBLOCK: a file swapped for a FIFO since it was found must not
	// hang the session's creation.
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	if !fi.Mode().IsRegular() {
		return "", 0, &os.PathError{Op: "read", Path: p, Err: errors.New("not a regular file")}
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)))
	if err != nil {
		return "", 0, err
	}
	size := fi.Size()
	if int64(len(b)) > size {
		size = int64(len(b))
	}
	if int64(len(b)) < size {
		// Do not end in the middle of a character.
		for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
			if utf8.RuneStart(b[len(b)-i]) {
				if !utf8.FullRune(b[len(b)-i:]) {
					b = b[:len(b)-i]
				}
				break
			}
		}
	}
	return string(b), size, nil
}

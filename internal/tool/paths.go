package tool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// unicodeSpaces are the spaces models (and macOS file names) produce where
// a plain space was meant; paths are compared with them folded to ' '.
var unicodeSpaces = strings.NewReplacer(
	"\u00a0", " ", "\u2000", " ", "\u2001", " ", "\u2002", " ", "\u2003", " ",
	"\u2004", " ", "\u2005", " ", "\u2006", " ", "\u2007", " ", "\u2008", " ",
	"\u2009", " ", "\u200a", " ", "\u202f", " ", "\u205f", " ", "\u3000", " ",
)

var errNULInPath = errors.New("path contains a NUL byte")

// resolve turns a path argument into a clean absolute path: an "@" prefix
// (how users cite files in prompts) is dropped, exotic spaces are folded,
// "~" expands to Env.Home, and relative paths join Env.Cwd. Absolute paths
// are allowed: policy about where a tool may go belongs to the permission
// layer, not here.
func (e *Env) resolve(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", errNULInPath
	}
	p = strings.TrimPrefix(p, "@")
	p = unicodeSpaces.Replace(p)
	if e.Home != "" {
		if p == "~" {
			p = e.Home
		} else if strings.HasPrefix(p, "~/") {
			p = e.Home + p[1:]
		}
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(e.Cwd, p)
	}
	return filepath.Clean(p), nil
}

// ResolvePath returns the absolute, clean path that the built-in tool
// called toolName works on for its path argument p, by the rules the tool
// itself follows (see resolve): read also tries macOS's screenshot
// spellings of a missing file, and ls, find and grep take an empty path
// as the working directory. The permission gate resolves with it, so a
// path rule sees the file the tool will open, however the model spelled
// it. Symlinks are not followed here; RealPath follows them.
//
// e need not be normalized: a relative or empty Cwd is made absolute the
// way the tools built from e make it.
func (e Env) ResolvePath(toolName, p string) (string, error) {
	e.Cwd = absCwd(e.Cwd)
	switch toolName {
	case "ls", "find", "grep":
		if p == "" {
			p = "."
		}
	case "read":
		if p == "" {
			return "", errEmptyPath
		}
		return e.resolveExisting(p)
	default:
		if p == "" {
			return "", errEmptyPath
		}
	}
	return e.resolve(p)
}

var errEmptyPath = errors.New("path is empty")

// absCwd is the working directory Env.normalize settles on.
func absCwd(cwd string) string {
	if cwd == "" {
		return "/"
	}
	if !filepath.IsAbs(cwd) {
		if abs, err := filepath.Abs(cwd); err == nil {
			cwd = abs
		}
	}
	return filepath.Clean(cwd)
}

// maxLinks is how many symlinks RealPath follows before it gives up, as
// Linux does (ELOOP after 40).
const maxLinks = 40

// ErrTooManyLinks is RealPath's answer for a path whose links loop.
var ErrTooManyLinks = errors.New("too many levels of symbolic links")

// RealPath returns the file the system reaches when a tool opens abs (an
// absolute, clean path, as ResolvePath returns): every symlink along the
// path followed, one component at a time, as the kernel does. Unlike
// filepath.EvalSymlinks it also answers for paths that do not exist yet,
// because write creates them: the components from the first missing one
// on are kept as they are (nothing there can redirect them yet), and a
// last component that is a dangling symlink is followed to where opening
// it for writing would create the file. It fails only on a loop of links.
//
// The answer is as of the call: a link changed between RealPath and the
// open (by a bash command, say) is not seen.
func RealPath(abs string) (string, error) {
	if !filepath.IsAbs(abs) {
		return "", fmt.Errorf("%q is not an absolute path", abs)
	}
	todo := strings.Split(abs, "/")
	done := "/"
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			// done has no links in it, so its parent is the real one.
			done = filepath.Dir(done)
			continue
		}
		next := filepath.Join(done, c)
		fi, err := os.Lstat(next)
		if err != nil {
			// Missing, or not searchable: the tool cannot get further
			// either, or creates what follows as plain directories.
			return filepath.Join(append([]string{next}, todo...)...), nil
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			done = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s: %w", abs, ErrTooManyLinks)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return filepath.Join(append([]string{next}, todo...)...), nil
		}
		if filepath.IsAbs(target) {
			done = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return done, nil
}

// resolveExisting is resolve for files that must already exist (read).
// When the literal path is missing it tries the spellings macOS uses in
// screenshot names, which models cannot type: a narrow no-break space
// before AM/PM and a curly apostrophe.
func (e *Env) resolveExisting(p string) (string, error) {
	abs, err := e.resolve(p)
	if err != nil {
		return "", err
	}
	if exists(abs) {
		return abs, nil
	}
	variants := []string{amPMVariant(abs), strings.ReplaceAll(abs, "'", "\u2019")}
	for _, v := range variants {
		if v != abs && exists(v) {
			return v, nil
		}
	}
	return abs, nil
}

func amPMVariant(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == ' ' && i+3 < len(p) && p[i+3] == '.' {
			w := strings.ToUpper(p[i+1 : i+3])
			if w == "AM" || w == "PM" {
				b.WriteString("\u202f")
				continue
			}
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// describeOpenError words a filesystem error for the model, naming the
// path it asked for rather than Go's syscall vocabulary.
func describeOpenError(display string, err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "File not found: " + display
	case errors.Is(err, os.ErrPermission):
		return "Permission denied: " + display
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return "Cannot access " + display + ": " + pe.Err.Error()
	}
	return "Cannot access " + display + ": " + err.Error()
}

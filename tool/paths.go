package tool

import (
	"errors"
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

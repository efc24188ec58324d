package tool

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
)

// ignoreRule is one pattern line of a .gitignore.
type ignoreRule struct {
	m        *globMatcher
	negate   bool // "!pattern": re-include
	dirOnly  bool // "pattern/": directories only
	anchored bool // contains a '/': relative to the file's directory, else any basename
}

// ignoreSet holds the rules that apply in and below dir, lowest priority
// first.
type ignoreSet struct {
	dir   string // absolute, clean
	rules []ignoreRule
}

// parseIgnore reads gitignore syntax (gitignore(5)): blank lines and
// "#" comments are skipped, trailing spaces are dropped unless escaped,
// "!" negates, a trailing "/" restricts to directories, and a pattern
// with any other "/" is anchored to the file's directory.
func parseIgnore(data []byte, rules []ignoreRule) []ignoreRule {
	for _, line := range bytes.Split(data, []byte{'\n'}) {
		s := strings.TrimSuffix(string(line), "\r")
		if s == "" || s[0] == '#' {
			continue
		}
		s = trimUnescapedSpaces(s)
		if s == "" {
			continue
		}
		var r ignoreRule
		if s[0] == '!' {
			r.negate = true
			s = s[1:]
		}
		if strings.HasSuffix(s, "/") {
			r.dirOnly = true
			s = strings.TrimRight(s, "/")
		}
		if s == "" {
			continue
		}
		if strings.Contains(s, "/") {
			r.anchored = true
			s = strings.TrimPrefix(s, "/")
		}
		m, err := compileGlob(s, false, false)
		if err != nil {
			continue // git ignores patterns it cannot parse; so do we
		}
		r.m = m
		rules = append(rules, r)
	}
	return rules
}

func trimUnescapedSpaces(s string) string {
	end := len(s)
	for end > 0 && (s[end-1] == ' ' || s[end-1] == '\t') {
		if end >= 2 && s[end-2] == '\\' {
			break
		}
		end--
	}
	return s[:end]
}

// match reports whether rel (relative to s.dir, slash-separated; name is
// its last element) is ignored, and whether any rule decided at all. The
// last matching rule wins, as in git.
func (s *ignoreSet) match(rel, name string, isDir bool) (ignored, decided bool) {
	for i := len(s.rules) - 1; i >= 0; i-- {
		r := &s.rules[i]
		if r.dirOnly && !isDir {
			continue
		}
		target := name
		if r.anchored {
			target = rel
		}
		if r.m.match(target) {
			return !r.negate, true
		}
	}
	return false, false
}

// ignoreFileNames are read in every directory, lowest priority first: the
// repository's own excludes (at its root), .gitignore, then .ignore, which
// ripgrep and fd give precedence over .gitignore.
var ignoreFileNames = []string{".gitignore", ".ignore"}

// loadIgnoreSet reads the ignore files of dir. has reports whether a name
// exists in dir, so a walk that has already listed dir costs no failed
// opens; nil means "try to open".
func loadIgnoreSet(dir string, has func(string) bool) *ignoreSet {
	var rules []ignoreRule
	if has == nil || has(".git") {
		if data, err := os.ReadFile(filepath.Join(dir, ".git", "info", "exclude")); err == nil {
			rules = parseIgnore(data, rules)
		}
	}
	for _, name := range ignoreFileNames {
		if has != nil && !has(name) {
			continue
		}
		if data, err := readSmallFile(filepath.Join(dir, name)); err == nil {
			rules = parseIgnore(data, rules)
		}
	}
	if len(rules) == 0 {
		return nil
	}
	return &ignoreSet{dir: dir, rules: rules}
}

// readSmallFile reads an ignore file only if it is a regular file of sane
// size: a FIFO named .gitignore must not hang a search.
func readSmallFile(p string) ([]byte, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > 4<<20 {
		return nil, os.ErrInvalid
	}
	return os.ReadFile(p)
}

// ancestorIgnores returns the ignore sets of root's ancestors, outermost
// first, up to the enclosing git repository's root. Outside a repository
// it returns none: without a repository boundary an ancestor rule (say, a
// home directory's "*") would silently hide whole projects.
func ancestorIgnores(root string) []*ignoreSet {
	var dirs []string
	found := false
	for d := root; ; {
		if exists(filepath.Join(d, ".git")) {
			found = true
			break
		}
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		dirs = append(dirs, parent)
		d = parent
	}
	if !found {
		return nil
	}
	var sets []*ignoreSet
	for i := len(dirs) - 1; i >= 0; i-- {
		if s := loadIgnoreSet(dirs[i], nil); s != nil {
			sets = append(sets, s)
		}
	}
	return sets
}

package tool

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// makeTree builds a small repository exercising ignore rules:
//
//	.git/            skipped entirely
//	.gitignore       *.log, build/, /root_only.txt, !keep.log
//	src/.gitignore   gen/, secret.txt
func makeTree(t *testing.T, root string) {
	t.Helper()
	files := map[string]string{
		".git/config":            "needle in git\n",
		".git/info/exclude":      "excluded.txt\n",
		".gitignore":             "# comment\n*.log\nbuild/\n/root_only.txt\n!keep.log\n",
		".env":                   "needle=1\n",
		".hidden/h.txt":          "needle hidden\n",
		"a.txt":                  "needle one\nhay\n",
		"app.log":                "needle in log\n",
		"keep.log":               "needle kept\n",
		"excluded.txt":           "needle excluded\n",
		"root_only.txt":          "needle root\n",
		"build/out.txt":          "needle build\n",
		"bin.dat":                "needle\x00binary\n",
		"README.md":              "readme\n",
		"src/.gitignore":         "gen/\nsecret.txt\n",
		"src/main.go":            "package main\n// needle\n",
		"src/root_only.txt":      "needle nested\n",
		"src/secret.txt":         "needle secret\n",
		"src/debug.log":          "needle debug\n",
		"src/gen/x.go":           "needle generated\n",
		"src/deep/inner/file.go": "needle deep\n",
		"src/Upper.TXT":          "upper\n",
	}
	for name, content := range files {
		writeFile(t, filepath.Join(root, name), content)
	}
	if err := os.Symlink("a.txt", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("src", filepath.Join(root, "srclink")); err != nil {
		t.Fatal(err)
	}
}

func TestGrep(t *testing.T) {
	env := testEnv(t)
	makeTree(t, env.Cwd)
	g := NewGrep(env)
	all := strings.Join([]string{
		".env:1: needle=1",
		".hidden/h.txt:1: needle hidden",
		"a.txt:1: needle one",
		"keep.log:1: needle kept",
		"src/deep/inner/file.go:1: needle deep",
		"src/main.go:2: // needle",
		"src/root_only.txt:1: needle nested",
	}, "\n")
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"honours ignores, skips .git and binaries", map[string]any{"pattern": "needle"}, all},
		{"glob by name", map[string]any{"pattern": "needle", "glob": "*.go"}, "src/deep/inner/file.go:1: needle deep\nsrc/main.go:2: // needle"},
		{"glob by path", map[string]any{"pattern": "needle", "glob": "src/**/*.go"}, "src/deep/inner/file.go:1: needle deep\nsrc/main.go:2: // needle"},
		{"glob with braces", map[string]any{"pattern": "needle", "glob": "*.{env,log}"}, ".env:1: needle=1\nkeep.log:1: needle kept"},
		{"negated glob", map[string]any{"pattern": "needle", "glob": "!src"}, ".env:1: needle=1\n.hidden/h.txt:1: needle hidden\na.txt:1: needle one\nkeep.log:1: needle kept"},
		{"sub directory keeps the repository's rules", map[string]any{"pattern": "needle", "path": "src"},
			"deep/inner/file.go:1: needle deep\nmain.go:2: // needle\nroot_only.txt:1: needle nested"},
		{"single file", map[string]any{"pattern": "needle", "path": "a.txt"}, "a.txt:1: needle one"},
		{"explicitly named ignored file", map[string]any{"pattern": "needle", "path": "app.log"}, "app.log:1: needle in log"},
		{"regex", map[string]any{"pattern": `needle (one|kept)$`}, "a.txt:1: needle one\nkeep.log:1: needle kept"},
		{"ignore case", map[string]any{"pattern": "NEEDLE ONE", "ignoreCase": true}, "a.txt:1: needle one"},
		{"case sensitive by default", map[string]any{"pattern": "NEEDLE"}, "No matches found"},
		{"literal", map[string]any{"pattern": "needle=1", "literal": true}, ".env:1: needle=1"},
		{"literal metacharacters", map[string]any{"pattern": "// n", "literal": "true"}, "src/main.go:2: // needle"},
		{"text anchors", map[string]any{"pattern": `\Ahay\z`}, "a.txt:2: hay"},
		{"line anchors", map[string]any{"pattern": `^hay$`}, "a.txt:2: hay"},
		{"context", map[string]any{"pattern": "hay", "context": 1}, "a.txt-1- needle one\na.txt:2: hay"},
		{"context both sides", map[string]any{"pattern": "^package", "context": 5, "path": "src"}, "main.go:1: package main\nmain.go-2- // needle"},
		{"no matches", map[string]any{"pattern": "zebra"}, "No matches found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := mustOK(t, run(t, g, tc.args))
			if got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}

	errTests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"missing pattern", map[string]any{}, "pattern: required string is missing"},
		{"bad regex", map[string]any{"pattern": "(unclosed"}, "Invalid regular expression"},
		{"missing path", map[string]any{"pattern": "x", "path": "nope"}, "Path not found: " + filepath.Join(env.Cwd, "nope")},
		{"bad boolean", map[string]any{"pattern": "x", "literal": "maybe"}, "literal: must be a boolean"},
		{"device", map[string]any{"pattern": "x", "path": "/dev/null"}, "not a regular file"},
	}
	for _, tc := range errTests {
		t.Run(tc.name, func(t *testing.T) {
			mustErr(t, run(t, g, tc.args), tc.want)
		})
	}
}

func TestGrepIgnoreCaseLiteral(t *testing.T) {
	env := testEnv(t)
	writeFile(t, filepath.Join(env.Cwd, "a.txt"), "Some KEY here\nnone\nkey again\n")
	// KELVIN SIGN folds to k: the fast ASCII path must not miss it.
	writeFile(t, filepath.Join(env.Cwd, "b.txt"), "\u212aEY kelvin\n")
	writeFile(t, filepath.Join(env.Cwd, "c.txt"), "no match\n")
	g := NewGrep(env)
	for _, args := range []map[string]any{
		{"pattern": "key", "ignoreCase": true},
		{"pattern": "Key", "ignoreCase": true, "literal": true},
	} {
		got := mustOK(t, run(t, g, args))
		if got != "a.txt:1: Some KEY here\na.txt:3: key again\nb.txt:1: \u212aEY kelvin" {
			t.Fatalf("%v: got\n%s", args, got)
		}
	}
}

func TestGrepOverlappingContext(t *testing.T) {
	env := testEnv(t)
	writeFile(t, filepath.Join(env.Cwd, "f.txt"), "a\nx1\nb\nx2\nc\n")
	got := mustOK(t, run(t, NewGrep(env), map[string]any{"pattern": "x", "context": 1}))
	// Each match brings its own block, as pi formats it.
	want := "f.txt-1- a\nf.txt:2: x1\nf.txt-3- b\nf.txt-3- b\nf.txt:4: x2\nf.txt-5- c"
	if got != want {
		t.Fatalf("got\n%s", got)
	}
}

func TestGrepLimits(t *testing.T) {
	env := testEnv(t)
	for i := range 30 {
		writeFile(t, filepath.Join(env.Cwd, fmt.Sprintf("f%02d.txt", i)), "match\nmatch\n")
	}
	g := NewGrep(env)

	r := run(t, g, map[string]any{"pattern": "match", "limit": 5})
	got := mustOK(t, r)
	want := "f00.txt:1: match\nf00.txt:2: match\nf01.txt:1: match\nf01.txt:2: match\nf02.txt:1: match\n\n" +
		"[5 matches limit reached. Use limit=10 for more, or refine pattern]"
	if got != want {
		t.Fatalf("got\n%s", got)
	}
	if m := detailsJSON(t, r); m["matchLimitReached"] != 5.0 {
		t.Fatalf("details %v", m)
	}
	// Exactly as many matches as the limit: nothing was left out.
	r = run(t, g, map[string]any{"pattern": "match", "limit": 60})
	if got := mustOK(t, r); strings.Contains(got, "limit reached") || strings.Count(got, "\n") != 59 || r.Details != nil {
		t.Fatalf("got %d lines, details %v", strings.Count(got, "\n")+1, r.Details)
	}
	// Default limit is 100; negative limits mean one.
	if got := mustOK(t, run(t, g, map[string]any{"pattern": "match", "limit": -4})); !strings.Contains(got, "[1 matches limit reached") {
		t.Fatalf("got %q", got)
	}

	// Long lines are cut at 500 characters.
	writeFile(t, filepath.Join(env.Cwd, "long", "l.txt"), "zz"+strings.Repeat("é", 600)+"\n")
	r = run(t, g, map[string]any{"pattern": "zz", "path": "long"})
	got = mustOK(t, r)
	if want := "l.txt:1: zz" + strings.Repeat("é", 498) + "... [truncated]\n\n[Some lines truncated to 500 chars. Use read tool to see full lines]"; got != want {
		t.Fatalf("got %q", got)
	}
	if m := detailsJSON(t, r); m["linesTruncated"] != true {
		t.Fatalf("details %v", m)
	}

	// Output over 50KB is cut to whole lines.
	var b strings.Builder
	for range 300 {
		b.WriteString("big " + strings.Repeat("b", 400) + "\n")
	}
	writeFile(t, filepath.Join(env.Cwd, "big", "b.txt"), b.String())
	r = run(t, g, map[string]any{"pattern": "big", "path": "big", "limit": 1000})
	got = mustOK(t, r)
	if !strings.HasSuffix(got, "\n\n[50.0KB limit reached]") {
		t.Fatalf("tail %q", got[len(got)-60:])
	}
	tr := r.Details.(GrepDetails).Truncation
	if tr.OutputLines != 123 || tr.TotalLines != 300 || tr.TruncatedBy != "bytes" || tr.MaxLines != unlimitedLines {
		t.Fatalf("truncation %+v", tr)
	}
}

// TestGrepStreaming searches with the in-memory threshold lowered, so the
// line-by-line path runs on ordinary files.
func TestGrepStreaming(t *testing.T) {
	env := testEnv(t)
	writeFile(t, filepath.Join(env.Cwd, "f.txt"), "a\nx1\nb\nx2\nc\nd\ne\nx3")
	writeFile(t, filepath.Join(env.Cwd, "g.bin"), "x\x00")
	g := &grepTool{env: env.normalize(), inMemory: 0}
	if got := mustOK(t, run(t, g, map[string]any{"pattern": "x"})); got != "f.txt:2: x1\nf.txt:4: x2\nf.txt:8: x3" {
		t.Fatalf("got\n%s", got)
	}
	got := mustOK(t, run(t, g, map[string]any{"pattern": "x", "context": 1}))
	want := "f.txt-1- a\nf.txt:2: x1\nf.txt-3- b\nf.txt-3- b\nf.txt:4: x2\nf.txt-5- c\nf.txt-7- e\nf.txt:8: x3"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if got := mustOK(t, run(t, g, map[string]any{"pattern": "x", "limit": 2})); !strings.HasSuffix(got, "[2 matches limit reached. Use limit=4 for more, or refine pattern]") {
		t.Fatalf("got\n%s", got)
	}
}

func TestFind(t *testing.T) {
	env := testEnv(t)
	makeTree(t, env.Cwd)
	f := NewFind(env)
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"by name", map[string]any{"pattern": "*.go"}, "src/deep/inner/file.go\nsrc/main.go"},
		{"by path", map[string]any{"pattern": "src/**/*.go"}, "src/deep/inner/file.go\nsrc/main.go"},
		{"path without **", map[string]any{"pattern": "inner/*.go"}, "src/deep/inner/file.go"},
		{"double star prefix", map[string]any{"pattern": "**/*.txt"}, ".hidden/h.txt\na.txt\nsrc/Upper.TXT\nsrc/root_only.txt"},
		{"braces", map[string]any{"pattern": "*.{go,md}"}, "README.md\nsrc/deep/inner/file.go\nsrc/main.go"},
		{"directories get a slash", map[string]any{"pattern": "*src*"}, "src/\nsrclink"},
		{"dotfiles included", map[string]any{"pattern": ".*"}, ".env\n.gitignore\n.hidden/\nsrc/.gitignore"},
		{"smart case: lower matches any case", map[string]any{"pattern": "readme*"}, "README.md"},
		{"smart case: upper is exact", map[string]any{"pattern": "*.TXT"}, "src/Upper.TXT"},
		{"classes", map[string]any{"pattern": "[ab].txt"}, "a.txt"},
		{"question mark", map[string]any{"pattern": "?.txt"}, ".hidden/h.txt\na.txt"},
		{"symlinks listed, not followed", map[string]any{"pattern": "link"}, "link"},
		{"within a path", map[string]any{"pattern": "*.go", "path": "src/deep"}, "inner/file.go"},
		{"nothing", map[string]any{"pattern": "*.rs"}, "No files found matching pattern"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := mustOK(t, run(t, f, tc.args))
			if got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
	r := run(t, f, map[string]any{"pattern": "*", "limit": 3})
	if got := mustOK(t, r); got != ".env\n.gitignore\n.hidden/\n\n[3 results limit reached. Use limit=6 for more, or refine pattern]" {
		t.Fatalf("got %q", got)
	}
	if m := detailsJSON(t, r); m["resultLimitReached"] != 3.0 {
		t.Fatalf("details %v", m)
	}
	mustErr(t, run(t, f, map[string]any{"pattern": "*", "path": "nope"}), "Path not found")
	mustErr(t, run(t, f, map[string]any{"pattern": "*", "path": "a.txt"}), "Not a directory")
	mustErr(t, run(t, f, map[string]any{"pattern": ""}), "pattern: must not be empty")
	mustErr(t, run(t, f, map[string]any{}), "pattern: required")
}

func TestLs(t *testing.T) {
	env := testEnv(t)
	for _, name := range []string{"b.txt", "A.txt", ".env", "c/x", "Dir/y", "_u"} {
		writeFile(t, filepath.Join(env.Cwd, name), "")
	}
	if err := os.Symlink("c", filepath.Join(env.Cwd, "clink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("missing", filepath.Join(env.Cwd, "broken")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(env.Cwd, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	l := NewLs(env)
	if got := mustOK(t, run(t, l, map[string]any{})); got != ".env\n_u\nA.txt\nb.txt\nc/\nclink/\nDir/\nempty/" {
		t.Fatalf("got\n%s", got)
	}
	if got := mustOK(t, run(t, l, map[string]any{"path": "c"})); got != "x" {
		t.Fatalf("got %q", got)
	}
	if got := mustOK(t, run(t, l, map[string]any{"path": "empty"})); got != "(empty directory)" {
		t.Fatalf("got %q", got)
	}
	r := run(t, l, map[string]any{"limit": 2})
	if got := mustOK(t, r); got != ".env\n_u\n\n[2 entries limit reached. Use limit=4 for more]" {
		t.Fatalf("got %q", got)
	}
	if m := detailsJSON(t, r); m["entryLimitReached"] != 2.0 {
		t.Fatalf("details %v", m)
	}
	mustErr(t, run(t, l, map[string]any{"path": "nope"}), "Path not found: "+filepath.Join(env.Cwd, "nope"))
	mustErr(t, run(t, l, map[string]any{"path": "b.txt"}), "Not a directory")
	mustErr(t, run(t, l, map[string]any{"limit": "x"}), "limit: must be a number")

	// Many entries: the default limit is 500.
	big := filepath.Join(env.Cwd, "big")
	for i := range 600 {
		writeFile(t, filepath.Join(big, fmt.Sprintf("f%03d", i)), "")
	}
	got := mustOK(t, run(t, l, map[string]any{"path": "big"}))
	if !strings.HasSuffix(got, "f499\n\n[500 entries limit reached. Use limit=1000 for more]") {
		t.Fatalf("tail %q", got[len(got)-80:])
	}
}

func TestIgnoreRules(t *testing.T) {
	rules := parseIgnore([]byte(strings.Join([]string{
		"# comment",
		"*.o",
		"!important.o",
		"/top.txt",
		"docs/*.md",
		"tmp/",
		"**/cache",
		"logs/**",
		"a/**/z",
		`\#hash`,
		`\!bang`,
		"trailing\\ ",
		"spaces   ",
		"[Bb]uild",
	}, "\n")), nil)
	set := &ignoreSet{dir: "/r", rules: rules}
	tests := []struct {
		rel   string
		isDir bool
		want  bool
	}{
		{"x.o", false, true},
		{"deep/y.o", false, true},
		{"important.o", false, false},
		{"top.txt", false, true},
		{"sub/top.txt", false, false},
		{"docs/a.md", false, true},
		{"docs/sub/a.md", false, false},
		{"other/docs/a.md", false, false},
		{"tmp", true, true},
		{"tmp", false, false},
		{"x/tmp", true, true},
		{"cache", true, true},
		{"x/y/cache", false, true},
		{"logs/a/b", false, true},
		{"logs", true, false},
		{"a/z", false, true},
		{"a/b/c/z", false, true},
		{"#hash", false, true},
		{"!bang", false, true},
		{"trailing ", false, true},
		{"spaces", false, true},
		{"Build", true, true},
		{"build", false, true},
		{"kept.c", false, false},
	}
	for _, tc := range tests {
		name := tc.rel[strings.LastIndexByte(tc.rel, '/')+1:]
		ignored, _ := set.match(tc.rel, name, tc.isDir)
		if ignored != tc.want {
			t.Errorf("%q (dir %v): ignored=%v want %v", tc.rel, tc.isDir, ignored, tc.want)
		}
	}
}

func TestGlob(t *testing.T) {
	tests := []struct {
		glob   string
		path   string
		noCase bool
		want   bool
	}{
		{"*.go", "main.go", false, true},
		{"*.go", "dir/main.go", false, false},
		{"*.go", "main.GO", true, true},
		{"*.go", "main.GO", false, false},
		{"**/*.go", "main.go", false, true},
		{"**/*.go", "a/b/main.go", false, true},
		{"src/**", "src/a/b", false, true},
		{"src/**/x", "src/x", false, true},
		{"src/**/x", "src/a/b/x", false, true},
		{"src/*/x", "src/a/b/x", false, false},
		{"?.txt", "a.txt", false, true},
		{"?.txt", "ab.txt", false, false},
		{"[a-c]x", "bx", false, true},
		{"[!a-c]x", "dx", false, true},
		{"[!a-c]x", "ax", false, false},
		{"[]]", "]", false, true},
		{"[", "[", false, true},
		{"*.{go,rs}", "x.rs", false, true},
		{"*.{go,rs}", "x.py", false, false},
		{"{a,b{c,d}}", "bd", false, true},
		{"{unclosed", "{unclosed", false, true},
		{`\*`, "*", false, true},
		{`\*`, "x", false, false},
		{"a.b", "axb", false, false},
		{"Makefile", "makefile", true, true},
		{"héllo*", "HÉLLO.txt", true, true},
	}
	for _, tc := range tests {
		m, err := compileGlob(tc.glob, true, tc.noCase)
		if err != nil {
			t.Fatalf("%q: %v", tc.glob, err)
		}
		if got := m.match(tc.path); got != tc.want {
			t.Errorf("glob %q on %q (nocase %v) = %v, want %v", tc.glob, tc.path, tc.noCase, got, tc.want)
		}
	}
}

// TestHeadCollector checks the streaming head truncation against the
// plain join-then-truncate it replaces.
func TestHeadCollector(t *testing.T) {
	for _, n := range []int{1, 10, 127, 128, 129, 1000} {
		var lines []string
		for i := range n {
			lines = append(lines, strings.Repeat("x", 400+i%3))
		}
		var h headCollector
		for _, l := range lines {
			h.add(l)
		}
		text, tr := h.finish()
		want := truncateHead(strings.Join(lines, "\n"), unlimitedLines, MaxBytes)
		want.Content, want.MaxLines = "", unlimitedLines
		if text != truncateHead(strings.Join(lines, "\n"), unlimitedLines, MaxBytes).Content || tr != want {
			t.Fatalf("n=%d: got %+v want %+v", n, tr, want)
		}
	}
}

func TestTruncateTail(t *testing.T) {
	tests := []struct {
		in         string
		maxLines   int
		maxBytes   int
		want       string
		truncated  bool
		by         string
		partial    bool
		outputLine int
	}{
		{"a\nb\nc\n", 3, 100, "a\nb\nc\n", false, "", false, 3},
		{"a\nb\nc\nd\n", 3, 100, "b\nc\nd", true, "lines", false, 3},
		{"aaaa\nbbbb\ncccc", 10, 9, "bbbb\ncccc", true, "bytes", false, 2},
		{"xxxxxxxxxx", 10, 4, "xxxx", true, "bytes", true, 1},
		{"ab\n\u00e9\u00e9\u00e9", 10, 5, "\u00e9\u00e9", true, "bytes", true, 1},
	}
	for _, tc := range tests {
		got := truncateTail(tc.in, tc.maxLines, tc.maxBytes)
		if got.Content != tc.want || got.Truncated != tc.truncated || got.TruncatedBy != tc.by || got.LastLinePartial != tc.partial || got.OutputLines != tc.outputLine {
			t.Errorf("truncateTail(%q, %d, %d) = %+v", tc.in, tc.maxLines, tc.maxBytes, got)
		}
	}
}

package archtest

import (
	"go/build"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/agentd-dev/agentd"

// faces are the packages that each speak one protocol to clients.
var faces = []string{"piserver", "pirpc", "convapi", "sessionws", "acp", "webui"}

// wiring are the packages that put the layers together (and may import
// faces and the engine): the commands and the bench they run.
var wiring = []string{"cmd/agentd", "cli", "loadgen", "engine", "archtest"}

// pkg is one package of the module with the imports of its non-test
// files.
type pkg struct {
	path    string // relative to the module: "server", "llm/llmtest"
	imports []string
}

// modulePackages lists the module's packages by parsing the import
// clauses of their files (go/build, as `go list` would for this GOOS).
func modulePackages(t *testing.T) []pkg {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module root: %v", err)
	}
	var out []pkg
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); p != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "node_modules") {
			return filepath.SkipDir
		}
		bp, err := build.Default.ImportDir(p, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		// Everything but the command lives under internal/, so no other
		// module can import agentd's packages and tie their names down.
		inner, ok := strings.CutPrefix(rel, "internal/")
		if !ok && rel != "cmd/agentd" {
			t.Errorf("package %s is outside internal/: only cmd/agentd may be importable", rel)
		}
		if ok {
			rel = inner
		}
		out = append(out, pkg{path: rel, imports: bp.Imports})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 30 {
		t.Fatalf("found %d packages under %s; the walk is broken", len(out), root)
	}
	return out
}

// local is an import path relative to the module, or "" for one outside it.
func local(imp string) string {
	if rel, ok := strings.CutPrefix(imp, module+"/internal/"); ok {
		return rel
	}
	if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
		return rel
	}
	return ""
}

// testHelper reports whether an import path is test machinery: the
// standard library's testing packages and net/http/httptest, or a
// package named like one (llm/llmtest, anything ending in "test").
func testHelper(imp string) bool {
	if imp == "testing" || strings.HasPrefix(imp, "testing/") || imp == "net/http/httptest" {
		return true
	}
	return strings.HasSuffix(path.Base(imp), "test")
}

// TestImportGraph fails when a face imports another face, when the core
// (everything but the faces and the wiring) imports a face or the
// engine, or when a production package imports test machinery.
func TestImportGraph(t *testing.T) {
	for _, p := range modulePackages(t) {
		isFace, isWiring := slices.Contains(faces, p.path), slices.Contains(wiring, p.path)
		isHelper := testHelper(p.path)
		for _, imp := range p.imports {
			to := local(imp)
			switch {
			case isFace && slices.Contains(faces, to):
				t.Errorf("face %s imports face %s: behaviour two faces need belongs in the shared layer", p.path, to)
			case !isFace && !isWiring && !isHelper && slices.Contains(faces, to):
				t.Errorf("core package %s imports face %s", p.path, to)
			case !isFace && !isWiring && !isHelper && to == "engine":
				t.Errorf("core package %s imports engine: declare what it needs (see package sessionspec) and let cli wire the engine in", p.path)
			case !isHelper && testHelper(imp):
				t.Errorf("production package %s imports test machinery %s", p.path, imp)
			}
		}
	}
}

// TestImportGraphRules checks the classification the rules rest on.
func TestImportGraphRules(t *testing.T) {
	cases := []struct {
		imp        string
		helper     bool
		localValue string
	}{
		{"testing", true, ""},
		{"testing/synctest", true, ""},
		{"net/http/httptest", true, ""},
		{module + "/llm/llmtest", true, "llm/llmtest"},
		{module + "/llm/wiremock", false, "llm/wiremock"},
		{"net/http", false, ""},
		{module + "/server", false, "server"},
	}
	for _, c := range cases {
		if got := testHelper(c.imp); got != c.helper {
			t.Errorf("testHelper(%q) = %v, want %v", c.imp, got, c.helper)
		}
		if got := local(c.imp); got != c.localValue {
			t.Errorf("local(%q) = %q, want %q", c.imp, got, c.localValue)
		}
	}
}

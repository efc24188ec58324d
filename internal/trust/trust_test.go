package trust

import (
	"os"
	"path/filepath"
	"testing"
)

func TestGrants(t *testing.T) {
	conf := t.TempDir()
	store := Open(filepath.Join(conf, FileName))
	project := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(project, link); err != nil {
		t.Fatal(err)
	}
	content := []byte(`{"mcpServers":{}}`)
	const file = ".agentd/mcp.json"
	if store.Trusted(project, file, content) {
		t.Fatal("trusted before any grant")
	}
	if err := store.Grant(link, file, content); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		dir     string
		file    string
		content []byte
		want    bool
	}{
		{"as granted", project, file, content, true},
		{"through the link it was granted by", link, file, content, true},
		{"changed content", project, file, []byte(`{"mcpServers":{"x":{"command":"sh"}}}`), false},
		{"another file", project, ".agentd/other.json", content, false},
		{"another project", t.TempDir(), file, content, false},
		{"a relative path", "rel", file, content, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := store.Trusted(tt.dir, tt.file, tt.content); got != tt.want {
				t.Fatalf("Trusted = %v, want %v", got, tt.want)
			}
		})
	}
	st, err := os.Stat(store.Path())
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("store file %v %v", st, err)
	}
	// A second process sees the grant.
	if !Open(store.Path()).Trusted(project, file, content) {
		t.Fatal("the grant was not kept")
	}
	if n, err := store.Revoke(project); err != nil || n != 1 {
		t.Fatalf("revoke %d %v", n, err)
	}
	if store.Trusted(project, file, content) {
		t.Fatal("trusted after revoke")
	}
}

// A project that contains the store cannot be trusted: what works in it
// could write its own grant.
func TestProjectContainingTheStore(t *testing.T) {
	home := t.TempDir()
	store := Open(filepath.Join(home, ".agentd", FileName))
	if err := store.Grant(home, ".agentd/mcp.json", []byte("{}")); err == nil {
		t.Fatal("granted a project that contains the store")
	}
	if store.Trusted(home, ".agentd/mcp.json", []byte("{}")) {
		t.Fatal("trusted")
	}
}

// A store that cannot be read trusts nothing and refuses grants.
func TestBrokenStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if err := os.WriteFile(path, []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	store := Open(path)
	project := t.TempDir()
	if store.Trusted(project, "f", nil) {
		t.Fatal("trusted")
	}
	if err := store.Grant(project, "f", nil); err == nil {
		t.Fatal("a grant over a broken store")
	}
}

package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/mcp"
	"github.com/agentd-dev/agentd/internal/trust"
)

// agentd trust records the project's file as it is, lists and revokes
// grants, and refuses a project with nothing to trust.
func TestTrustCommand(t *testing.T) {
	home, project := t.TempDir(), t.TempDir()
	getenv := func(k string) string {
		if k == "HOME" {
			return home
		}
		return ""
	}
	run := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := New(strings.NewReader(""), &out, &errOut, getenv).Run(context.Background(), append([]string{"trust"}, args...))
		return out.String(), errOut.String(), code
	}
	if _, errOut, code := run(project); code != ExitError || !strings.Contains(errOut, "nothing to trust") {
		t.Fatalf("no file: exit %d %s", code, errOut)
	}
	content := []byte(`{"mcpServers":{"files":{"command":"/bin/true","args":["x"]}}}`)
	if err := os.MkdirAll(filepath.Join(project, ".agentd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project, mcp.ProjectFile), content, 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(project)
	if code != ExitOK || !strings.Contains(out, "files: /bin/true x") {
		t.Fatalf("trust: exit %d\n%s%s", code, out, errOut)
	}
	store := trust.Open(filepath.Join(home, ".agentd", trust.FileName))
	if !store.Trusted(project, mcp.ProjectFile, content) {
		t.Fatal("not recorded")
	}
	if store.Trusted(project, mcp.ProjectFile, append(content, ' ')) {
		t.Fatal("a changed file is trusted")
	}
	if out, _, code := run("--list"); code != ExitOK || !strings.Contains(out, mcp.ProjectFile) {
		t.Fatalf("--list: %d %s", code, out)
	}
	if out, _, code := run("--revoke", project); code != ExitOK || !strings.Contains(out, "revoked 1 grant") {
		t.Fatalf("--revoke: %d %s", code, out)
	}
	if store.Trusted(project, mcp.ProjectFile, content) {
		t.Fatal("trusted after --revoke")
	}
	if _, _, code := run("a", "b"); code != ExitUsage {
		t.Fatalf("two directories: exit %d", code)
	}
}

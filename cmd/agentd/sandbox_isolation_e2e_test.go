//go:build linux

package main

import (
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

// What a confined tool can read, through a real agentd serve under its
// default sandbox (workspace-write), started with provider keys and
// other secrets in its environment, --token, and a key file it must hide
// (--sandbox-hide): the model's bash cannot read agentd's
// /proc/<pid>/environ or cmdline (the pid does not exist in the
// command's namespace), nor anything of the data dir (another
// session's transcript), the config dir (models.json), the key file or
// another session's workspace; its own workspace works; its environment
// has every secret-looking variable removed but the one
// --sandbox-env-allow names.
//
// As root, and as an ordinary user (nobody, when the test runs as root),
// where agentd runs its commands in a user namespace of their own.
func TestSandboxServeIsolation(t *testing.T) {
	t.Parallel()
	if s := sandbox.Probe(); s.Err != nil {
		t.Skipf("no Landlock on this kernel, the sandbox cannot be tested: %v", s.Err)
	}
	if err := sandbox.ProbeIsolation(agentdBin); err != nil {
		t.Skipf("commands cannot be isolated here: %v", err)
	}
	t.Run("as this user", func(t *testing.T) {
		t.Parallel()
		sandboxServeIsolation(t, nil)
	})
	t.Run("as nobody", func(t *testing.T) {
		t.Parallel()
		if os.Geteuid() != 0 {
			t.Skip("only root can start agentd as another user; this run is one already")
		}
		sandboxServeIsolation(t, &syscall.Credential{Uid: 65534, Gid: 65534})
	})
}

// sandboxServeIsolation is TestSandboxServeIsolation with agentd running
// as cred (nil: as the test).
func sandboxServeIsolation(t *testing.T, cred *syscall.Credential) {
	e := e2eNewEnv(t, e2eOpts{})
	peer := filepath.Join(e.root, "peer")
	keyFile := filepath.Join(e.root, "cluster.creds")
	files := map[string]string{
		filepath.Join(peer, "notes"): "PEER-WORKSPACE-SECRET",
		keyFile:                      "KEY-FILE-SECRET",
		filepath.Join(e.home, ".agentd", "marker"): "CONFIG-DIR-SECRET",
		filepath.Join(e.data, "marker"):            "DATA-DIR-SECRET",
		filepath.Join(e.cwd, "mine"):               "OWN-FILE",
	}
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if cred != nil {
		asUser(t, e.root, cred)
	}
	const token = "server-token-SECRET-0123456789"
	secrets := map[string]string{
		"ANTHROPIC_API_KEY":     "sk-ant-SECRET",
		"OPENAI_API_KEY":        "sk-oai-SECRET",
		"GITHUB_TOKEN":          "ghp-SECRET",
		"AWS_SECRET_ACCESS_KEY": "aws-SECRET",
		"ANTHROPIC_AUTH_TOKEN":  "auth-SECRET",
		"DB_PASSWORD":           "db-SECRET",
	}
	env := []string{"KEEP_THIS_TOKEN=kept-on-purpose"}
	for k, v := range secrets {
		env = append(env, k+"="+v)
	}
	s := svLaunch(t, e, svOpts{env: env, cred: cred}, "--token", token, "--sandbox-hide", keyFile, "--sandbox-env-allow", "KEEP_THIS_TOKEN")
	dial := func(name string) *svConn {
		c := s.dialRaw(t, svDialOpts{name: name, header: http.Header{"Authorization": {"Bearer " + token}}})
		c.ready()
		return c
	}
	A := dial("A")
	// Another session, in a workspace of its own, with a transcript in
	// the data dir.
	A.must("create_session", svM{"sessionId": "peer", "cwd": peer})
	svPrompt(A, "peer", "PEER-TRANSCRIPT-SECRET")
	A.must("create_session", svM{"sessionId": "own"})

	pid := s.cmd.Process.Pid
	script := fmt.Sprintf(`cat /proc/%d/environ /proc/%d/cmdline 2>&1 | tr '\0' ' '; echo
cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' '; echo
cat %q %q %q %q 2>&1
grep -rs SECRET %q %q; echo
env
echo "own: $(cat mine)"; echo new > new && echo "wrote: $(cat new)"`, pid, pid,
		filepath.Join(peer, "notes"), keyFile, filepath.Join(e.home, ".agentd", "models.json"), filepath.Join(e.data, "marker"),
		e.data, e.home)
	A.send(svM{"id": "p1", "type": "prompt", "sessionId": "own", "message": "CMD:" + script})
	te := A.waitEvent("own", "tool_execution_end")
	svWantOK(t, A.response("p1"))
	out := svStr(te.m, "event", "result", "content", "0", "text")
	leaks := []string{token, "PEER-WORKSPACE-SECRET", "KEY-FILE-SECRET", "CONFIG-DIR-SECRET", "DATA-DIR-SECRET", "PEER-TRANSCRIPT-SECRET", "sk-mock-key"}
	for k, v := range secrets {
		leaks = append(leaks, v, k+"=")
	}
	for _, l := range leaks {
		if strings.Contains(out, l) {
			t.Errorf("a confined command read %q:\n%s", l, out)
		}
	}
	for _, want := range []string{fmt.Sprintf("/proc/%d/environ: No such file or directory", pid), "KEEP_THIS_TOKEN=kept-on-purpose", "own: OWN-FILE", "wrote: new"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in the output:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(e.cwd, "new")); err != nil {
		t.Errorf("the write in the workspace did not reach it: %v", err)
	}

	// The read tool, which runs in agentd itself, refuses the same.
	for i, path := range []string{filepath.Join(e.home, ".agentd", "models.json"), keyFile, filepath.Join(peer, "notes")} {
		prompt := fmt.Sprintf("READ-%d", i)
		e.tweak(prompt, func(s *wiremock.Script) { *s = e2eToolScript("read", map[string]string{"path": path}) })
		id := fmt.Sprintf("r%d", i)
		A.send(svM{"id": id, "type": "prompt", "sessionId": "own", "message": prompt})
		te := A.waitEvent("own", "tool_execution_end")
		svWantOK(t, A.response(id))
		if got := svStr(te.m, "event", "result", "content", "0", "text"); !strings.Contains(got, "the sandbox hides it") {
			t.Errorf("read %s: %q, want it refused", path, got)
		}
	}
}

// asUser gives root (a test's directory) to cred's user, with the
// directories above it and agentd's binary open to it, or skips the test
// where that user cannot run confined commands.
func asUser(t *testing.T, root string, cred *syscall.Credential) {
	t.Helper()
	for _, d := range []string{filepath.Dir(root), buildDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
	if err != nil {
		t.Fatal(err)
	}
	probe := exec.Command(agentdBin, sandbox.Command, "--mode", "read-only", "--", "/bin/true")
	probe.Dir = root
	probe.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("uid %d cannot run confined commands here: %v %s", cred.Uid, err, out)
	}
}

//go:build linux

package sandbox

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Started as the helper, the test binary is the helper (see Main).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Command {
		os.Exit(Main(os.Args[2:], os.Stderr))
	}
	os.Exit(m.Run())
}

// needIsolation skips a test where commands cannot get namespaces (or
// Landlock) here.
func needIsolation(t *testing.T) {
	t.Helper()
	if s := Probe(); s.Err != nil {
		t.Skipf("no Landlock: %v", s.Err)
	}
	if err := ProbeIsolation("/proc/self/exe"); err != nil {
		t.Skipf("commands cannot be isolated here: %v", err)
	}
}

// isolationDirs is a data dir holding the session's own workspace and
// another session's transcript, a config dir, a token file and another
// session's workspace elsewhere, all readable by anyone (so an ordinary
// user is kept out by the sandbox, not by permissions).
type isolationDirs struct{ root, data, own, cfg, token, peer string }

func newIsolationDirs(t *testing.T) isolationDirs {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for p := root; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d := isolationDirs{root: root, data: filepath.Join(root, "data"), cfg: filepath.Join(root, "cfg"),
		token: filepath.Join(root, "token"), peer: filepath.Join(root, "peer")}
	d.own = filepath.Join(d.data, "ws", "own")
	files := map[string]string{
		filepath.Join(d.data, "sessions", "s.jsonl"): "TRANSCRIPT-SECRET",
		filepath.Join(d.data, "fingerprint.key"):     "FINGERPRINT-SECRET",
		filepath.Join(d.cfg, "models.json"):          "MODELS-SECRET",
		d.token:                                      "TOKEN-SECRET",
		filepath.Join(d.peer, "notes"):               "PEER-SECRET",
		filepath.Join(d.own, "mine"):                 "MINE",
	}
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(d.own, 0o777); err != nil {
		t.Fatal(err)
	}
	return d
}

// probeScript prints what a confined command can read of each secret,
// what the processes it sees are, and whether its own workspace works.
const probeScript = `
for f in "$DATA/sessions/s.jsonl" "$DATA/fingerprint.key" "$CFG/models.json" "$TOKEN" "$PEER/notes"; do
  cat "$f" 2>/dev/null; echo
done
echo "listed: $(ls "$DATA" | tr '\n' ,) $(ls "$DATA/ws" | tr '\n' ,)"
echo "own: $(cat mine)"
echo written > new && echo "wrote: $(cat new)"
echo "parent environ: $(cat /proc/$PARENT/environ 2>&1 | tr '\0' ' ')"
echo "test processes: $(cat /proc/[0-9]*/cmdline | tr '\0' '\n' | grep -c -e "$MARK")"
echo "pid: $$"
echo "pid1: $(tr '\0' ' ' < /proc/1/cmdline)"
`

func runProbe(t *testing.T, d isolationDirs, cred *syscall.Credential) string {
	t.Helper()
	p := Policy{Mode: WorkspaceWrite, Writable: []string{d.own}, Hidden: []string{d.data, d.cfg, d.token, d.peer}}
	argv := p.Wrap("/proc/self/exe", []string{"/bin/sh", "-c", probeScript})
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = d.own
	cmd.Env = []string{"PATH=/usr/bin:/bin", "DATA=" + d.data, "CFG=" + d.cfg, "TOKEN=" + d.token, "PEER=" + d.peer,
		"PARENT=" + strconv.Itoa(os.Getpid()), "MARK=-tes[t][.]"}
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the confined command failed: %v\n%s", err, out.String())
	}
	return out.String()
}

// A confined command cannot read agentd's data or config directory, a
// token file or another session's workspace, nor see agentd's process
// (its /proc shows only its own namespace); its own workspace, under the
// hidden data directory here, still reads and writes. As root, and as an
// ordinary user (in a user namespace of its own) where one can be used.
func TestIsolatedCommandReads(t *testing.T) {
	needIsolation(t)
	users := []struct {
		name string
		cred *syscall.Credential
	}{{"as this user", nil}}
	if os.Geteuid() == 0 {
		users = append(users, struct {
			name string
			cred *syscall.Credential
		}{"as nobody", &syscall.Credential{Uid: 65534, Gid: 65534}})
	}
	for _, u := range users {
		t.Run(u.name, func(t *testing.T) {
			d := newIsolationDirs(t)
			if u.cred != nil {
				if err := os.Chmod(d.own, 0o777); err != nil {
					t.Fatal(err)
				}
				argv := Policy{Mode: ReadOnly}.Wrap("/proc/self/exe", []string{"/bin/true"})
				cmd := exec.Command(argv[0], argv[1:]...)
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.cred}
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Skipf("an ordinary user cannot isolate commands here: %v %s", err, out)
				}
			}
			out := runProbe(t, d, u.cred)
			for _, secret := range []string{"TRANSCRIPT-SECRET", "FINGERPRINT-SECRET", "MODELS-SECRET", "TOKEN-SECRET", "PEER-SECRET"} {
				if strings.Contains(out, secret) {
					t.Errorf("the confined command read %s:\n%s", secret, out)
				}
			}
			_, pid1, _ := strings.Cut(out, "pid1: ")
			if !strings.Contains(pid1, Command) || strings.Contains(pid1, d.peer) || strings.Contains(pid1, d.cfg) {
				t.Errorf("pid 1's command line should be the helper's, without the hidden paths: %q", pid1)
			}
			for _, want := range []string{"own: MINE", "wrote: written", "listed: ws, own,\n", "parent environ: cat: /proc/", "test processes: 0\n"} {
				if !strings.Contains(out, want) {
					t.Errorf("want %q in:\n%s", want, out)
				}
			}
		})
	}
}

// The helper ends as the command did (an exit code, or the signal that
// killed it), although the command ran as the child of another process;
// a process the command left running goes on after the helper returned.
func TestIsolatedExitStatus(t *testing.T) {
	needIsolation(t)
	dir := t.TempDir()
	cases := []struct {
		script string
		code   int
		signal syscall.Signal
	}{
		{"exit 0", 0, 0},
		{"exit 3", 3, 0},
		{"kill -TERM $$", 0, syscall.SIGTERM},
		{"kill -KILL $$", 0, syscall.SIGKILL},
		{"kill -SEGV $$", 0, syscall.SIGSEGV},
	}
	for _, c := range cases {
		t.Run(c.script, func(t *testing.T) {
			argv := Policy{Mode: WorkspaceWrite, Writable: []string{dir}}.Wrap("/proc/self/exe", []string{"/bin/sh", "-c", c.script})
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if c.signal != 0 {
				if !ws.Signaled() || ws.Signal() != c.signal {
					t.Fatalf("status %v (%v), want killed by %v; %s", ws, err, c.signal, out)
				}
				return
			}
			if ws.Signaled() || ws.ExitStatus() != c.code {
				t.Fatalf("status %v (%v), want exit %d; %s", ws, err, c.code, out)
			}
		})
	}
	t.Run("background job outlives the call", func(t *testing.T) {
		// The job waits for the end of its input, which the test closes
		// only after the helper returned, then writes to its output.
		inR, inW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer outR.Close()
		argv := Policy{Mode: WorkspaceWrite, Writable: []string{dir}}.Wrap("/proc/self/exe",
			[]string{"/bin/sh", "-c", "exec 3<&0; (cat <&3 >/dev/null; echo ok) & exit 0"})
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir, cmd.Stdin, cmd.Stdout, cmd.Stderr = dir, inR, outW, outW
		err = cmd.Run()
		inR.Close()
		outW.Close()
		if err != nil {
			t.Fatal(err)
		}
		inW.Close() // lets the job go on
		if b, err := io.ReadAll(outR); err != nil || string(b) != "ok\n" {
			t.Fatalf("the job wrote %q (%v), want ok: it did not outlive the helper", b, err)
		}
	})
}

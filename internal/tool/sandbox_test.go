package tool

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentd-dev/agentd/internal/sandbox"
)

// needLandlock skips a test on a kernel without (usable) Landlock: there
// is nothing to confine with, and agentd refuses to pretend it does.
func needLandlock(t *testing.T) {
	t.Helper()
	if s := sandbox.Probe(); s.Err != nil {
		t.Skipf("no Landlock on this kernel, the sandbox cannot be tested: %v", s.Err)
	}
}

// sandboxEnv is testEnv under a policy of mode: work is the workspace,
// tmp the temp dir, home and outside are elsewhere.
type sandboxDirs struct{ work, tmp, home, outside string }

func sandboxEnv(t *testing.T, mode sandbox.Mode, network, supervised bool) (Env, sandboxDirs) {
	t.Helper()
	var env Env
	if supervised {
		env = supervisedEnv(t, false)
		t.Cleanup(func() { env.Scope.Close() })
	} else {
		env = testEnv(t)
	}
	d := sandboxDirs{work: env.Cwd, tmp: env.TempDir, home: env.Home, outside: t.TempDir()}
	env.Environ = append(env.Environ, "HOME="+d.home, "TMPDIR="+d.tmp)
	env.Sandbox = sandbox.NewBox(sandbox.Policy{Mode: mode, Network: network, Writable: []string{d.work, d.tmp}}, "/proc/self/exe")
	return env, d
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func TestSandboxBashWrites(t *testing.T) {
	needLandlock(t)
	// Each command tries to create the file want names; allowed says in
	// which modes it may.
	cases := []struct {
		name    string
		command string
		file    string // relative to the dirs, as "work/x"
		allowed []sandbox.Mode
	}{
		{"home", `touch "$HOME/x"`, "home/x", []sandbox.Mode{sandbox.FullAccess}},
		{"outside", `echo hi > "$OUT/f"`, "outside/f", []sandbox.Mode{sandbox.FullAccess}},
		{"workspace", `echo hi > "$WORK/f"`, "work/f", []sandbox.Mode{sandbox.WorkspaceWrite, sandbox.FullAccess}},
		{"relative in cwd", `mkdir -p d && echo hi > d/f`, "work/d/f", []sandbox.Mode{sandbox.WorkspaceWrite, sandbox.FullAccess}},
		{"temp dir", `echo hi > "$TMPDIR/f"`, "tmp/f", []sandbox.Mode{sandbox.WorkspaceWrite, sandbox.FullAccess}},
		{"child sh", `sh -c 'echo hi > "$OUT/child"'`, "outside/child", []sandbox.Mode{sandbox.FullAccess}},
		{"background job", `(echo hi > "$OUT/bg") & wait $!`, "outside/bg", []sandbox.Mode{sandbox.FullAccess}},
		{"setsid grandchild", `setsid -w sh -c 'sh -c "echo hi > \"$OUT/setsid\""'`, "outside/setsid", []sandbox.Mode{sandbox.FullAccess}},
		{"symlink out of the workspace", `ln -s "$OUT" link && echo hi > link/via`, "outside/via", []sandbox.Mode{sandbox.FullAccess}},
		{"mv out of the workspace", `echo hi > m && mv m "$OUT/moved"`, "outside/moved", []sandbox.Mode{sandbox.FullAccess}},
	}
	for _, supervised := range []bool{false, true} {
		for _, mode := range sandbox.Modes {
			for _, c := range cases {
				t.Run(fmt.Sprintf("%s/supervised=%v/%s", mode, supervised, c.name), func(t *testing.T) {
					env, d := sandboxEnv(t, mode, false, supervised)
					env.Environ = append(env.Environ, "OUT="+d.outside, "WORK="+d.work)
					tl := NewBash(env)
					r := runBash(t, context.Background(), tl, map[string]any{"command": c.command}, nil)
					dir, rest, _ := strings.Cut(c.file, "/")
					root := map[string]string{"work": d.work, "tmp": d.tmp, "home": d.home, "outside": d.outside}[dir]
					got := fileExists(filepath.Join(root, rest))
					want := false
					for _, m := range c.allowed {
						want = want || m == mode
					}
					if got != want {
						t.Fatalf("file created = %v, want %v; result: %s", got, want, textOf(r.res))
					}
					if !want && !r.res.IsError {
						t.Fatalf("a refused write should fail the command; result: %s", textOf(r.res))
					}
				})
			}
		}
	}
}

func TestSandboxNetwork(t *testing.T) {
	needLandlock(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	defer wg.Wait()
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	cases := []struct {
		mode    sandbox.Mode
		network bool
		allowed bool
	}{
		{sandbox.ReadOnly, false, false},
		{sandbox.WorkspaceWrite, false, false},
		{sandbox.ReadOnly, true, true},
		{sandbox.WorkspaceWrite, true, true},
		{sandbox.FullAccess, false, true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/network=%v", c.mode, c.network), func(t *testing.T) {
			env, _ := sandboxEnv(t, c.mode, c.network, false)
			// The connect happens in a child of bash: what bash starts is
			// confined like bash.
			cmd := fmt.Sprintf(`bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' && echo connected`, port)
			r := runBash(t, context.Background(), NewBash(env), map[string]any{"command": cmd}, nil)
			got := strings.Contains(textOf(r.res), "connected")
			if got != c.allowed {
				t.Fatalf("connected = %v, want %v; result: %s", got, c.allowed, textOf(r.res))
			}
			if !c.allowed && !strings.Contains(textOf(r.res), "network") {
				t.Fatalf("the model should be told the network was refused; result: %s", textOf(r.res))
			}
		})
	}
}

// TestSandboxEscalation: a refused command asks the person; approving
// once reruns it with access, always widens the session, deny leaves it
// refused.
func TestSandboxEscalation(t *testing.T) {
	needLandlock(t)
	cases := []struct {
		answer  sandbox.Answer
		created bool
		widened bool
	}{
		{sandbox.Deny, false, false},
		{sandbox.Once, true, false},
		{sandbox.Always, true, true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.answer), func(t *testing.T) {
			env, d := sandboxEnv(t, sandbox.WorkspaceWrite, false, true)
			var asked []sandbox.Request
			env.Sandbox.SetAsker(func(_ context.Context, r sandbox.Request) (sandbox.Answer, error) {
				asked = append(asked, r)
				return c.answer, nil
			})
			target := filepath.Join(d.outside, "f")
			r := runBash(t, context.Background(), NewBash(env), map[string]any{"command": "echo hi > " + target}, nil)
			if len(asked) != 1 || !asked[0].Need.Write || asked[0].Command != "echo hi > "+target || asked[0].ToolName != "bash" {
				t.Fatalf("asked %+v, want one write escalation for the command", asked)
			}
			if got := fileExists(target); got != c.created {
				t.Fatalf("created = %v, want %v; result: %s", got, c.created, textOf(r.res))
			}
			if r.res.IsError == c.created {
				t.Fatalf("IsError = %v; result: %s", r.res.IsError, textOf(r.res))
			}
			if got := env.Sandbox.Policy().AllowsWrite(d.outside); got != c.widened {
				t.Fatalf("session widened = %v, want %v", got, c.widened)
			}
			// Next command: asks again unless the person said always.
			second := filepath.Join(d.outside, "g")
			runBash(t, context.Background(), NewBash(env), map[string]any{"command": "echo hi > " + second}, nil)
			wantAsks := 2
			if c.widened {
				wantAsks = 1
			}
			if len(asked) != wantAsks {
				t.Fatalf("asked %d times, want %d", len(asked), wantAsks)
			}
		})
	}
}

func TestSandboxFileTools(t *testing.T) {
	cases := []struct {
		name    string
		mode    sandbox.Mode
		setup   func(t *testing.T, d sandboxDirs)
		path    func(d sandboxDirs) string
		allowed bool
	}{
		{"workspace file", sandbox.WorkspaceWrite, nil, func(d sandboxDirs) string { return "a.txt" }, true},
		{"temp dir", sandbox.WorkspaceWrite, nil, func(d sandboxDirs) string { return filepath.Join(d.tmp, "a.txt") }, true},
		{"new subdirectory", sandbox.WorkspaceWrite, nil, func(d sandboxDirs) string { return "new/dir/a.txt" }, true},
		{"outside", sandbox.WorkspaceWrite, nil, func(d sandboxDirs) string { return filepath.Join(d.outside, "a.txt") }, false},
		{"home", sandbox.WorkspaceWrite, nil, func(d sandboxDirs) string { return "~/a.txt" }, false},
		{"dot-dot", sandbox.WorkspaceWrite, nil, func(d sandboxDirs) string { return "../" + filepath.Base(d.outside) + "/a.txt" }, false},
		{"symlinked directory", sandbox.WorkspaceWrite, func(t *testing.T, d sandboxDirs) {
			must(t, os.Symlink(d.outside, filepath.Join(d.work, "link")))
		}, func(d sandboxDirs) string { return "link/a.txt" }, false},
		{"symlinked file", sandbox.WorkspaceWrite, func(t *testing.T, d sandboxDirs) {
			must(t, os.WriteFile(filepath.Join(d.outside, "a.txt"), []byte("old"), 0o644))
			must(t, os.Symlink(filepath.Join(d.outside, "a.txt"), filepath.Join(d.work, "a.txt")))
		}, func(d sandboxDirs) string { return "a.txt" }, false},
		{"dangling symlink", sandbox.WorkspaceWrite, func(t *testing.T, d sandboxDirs) {
			must(t, os.Symlink(filepath.Join(d.outside, "a.txt"), filepath.Join(d.work, "a.txt")))
		}, func(d sandboxDirs) string { return "a.txt" }, false},
		{"read-only workspace", sandbox.ReadOnly, nil, func(d sandboxDirs) string { return "a.txt" }, false},
		{"full access outside", sandbox.FullAccess, nil, func(d sandboxDirs) string { return filepath.Join(d.outside, "a.txt") }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env, d := sandboxEnv(t, c.mode, false, false)
			env.Home = d.home
			if c.setup != nil {
				c.setup(t, d)
			}
			p := c.path(d)
			r := run(t, NewWrite(env), map[string]any{"path": p, "content": "new"})
			if r.IsError == c.allowed {
				t.Fatalf("write %s: IsError = %v: %s", p, r.IsError, textOf(r))
			}
			if !c.allowed {
				if !strings.Contains(textOf(r), "sandbox") {
					t.Fatalf("the refusal should name the sandbox: %s", textOf(r))
				}
				if b, err := os.ReadFile(filepath.Join(d.outside, "a.txt")); err == nil && string(b) == "new" {
					t.Fatal("the file outside was written")
				}
			}
			// edit is refused alike (on a file that exists where it leads).
			er := run(t, NewEdit(env), map[string]any{"path": p, "oldText": "new", "newText": "newer"})
			if !c.allowed && (!er.IsError || !strings.Contains(textOf(er), "sandbox")) {
				t.Fatalf("edit %s should be refused by the sandbox: %s", p, textOf(er))
			}
			if c.allowed && er.IsError {
				t.Fatalf("edit %s: %s", p, textOf(er))
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkBashSandbox measures what the sandbox adds to starting a
// command: one more exec of agentd (the helper) and the Landlock calls.
func BenchmarkBashSandbox(b *testing.B) {
	if s := sandbox.Probe(); s.Err != nil {
		b.Skipf("no Landlock: %v", s.Err)
	}
	for _, supervised := range []bool{false, true} {
		for _, mode := range []sandbox.Mode{sandbox.FullAccess, sandbox.WorkspaceWrite} {
			b.Run(fmt.Sprintf("supervised=%v/%s", supervised, mode), func(b *testing.B) {
				env := testEnv(b)
				if supervised {
					sup, err := supervisorArgv(false)
					if err != nil {
						b.Fatal(err)
					}
					env.Supervisor, env.Scope = sup, NewScope()
					env.Environ = append(env.Environ, raceNoExitSleep)
					defer env.Scope.Close()
				}
				env.Sandbox = sandbox.NewBox(sandbox.Policy{Mode: mode, Writable: []string{env.Cwd, env.TempDir}}, "/proc/self/exe")
				for b.Loop() {
					if r := RunBash(context.Background(), env, "true", 0, nil); r.ExitCode != nil || r.StartError != "" {
						b.Fatalf("%+v", r)
					}
				}
			})
		}
	}
}

// Each confined command runs in a PID namespace of its own: a process
// one command left running in the background is not visible to the next
// (which cannot signal it either), and keeps running until the session
// ends, as before.
func TestSandboxCommandsDoNotSeeEachOther(t *testing.T) {
	needLandlock(t)
	needIsolation(t)
	env, _ := sandboxEnv(t, sandbox.WorkspaceWrite, false, true)
	r := runBash(t, context.Background(), NewBash(env), map[string]any{"command": "exec -a agentd-bg-sleeper sleep 60 >/dev/null 2>&1 & echo started", "background": true}, nil)
	if r.res.IsError {
		t.Fatal(textOf(r.res))
	}
	r = runBash(t, context.Background(), NewBash(env), map[string]any{"command": "cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo; echo listed"}, nil)
	if got := textOf(r.res); !strings.Contains(got, "listed") || strings.Contains(got, "agentd-bg-sleeper") || strings.Contains(got, "__supervise") {
		t.Fatalf("the next command sees the processes of the one before, or its supervisor: %s", got)
	}
}

// needIsolation skips a test where confined commands cannot get
// namespaces of their own.
func needIsolation(t *testing.T) {
	t.Helper()
	if err := sandbox.ProbeIsolation("/proc/self/exe"); err != nil {
		t.Skipf("commands cannot be isolated here: %v", err)
	}
}

// The file tools refuse what the sandbox hides from bash: a hidden
// directory (agentd's data dir, another session's workspace) and a
// hidden file cannot be read, listed, searched, edited or written, and
// a search of a directory holding one leaves it out; the session's own
// directory, under a hidden one here, still works.
func TestSandboxFileToolsHide(t *testing.T) {
	env := testEnv(t)
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, peer, key := filepath.Join(root, "data"), filepath.Join(root, "peer"), filepath.Join(root, "key")
	env.Cwd = filepath.Join(data, "ws", "own")
	writeFile(t, filepath.Join(data, "sessions", "s.jsonl"), "needle in a transcript\n")
	writeFile(t, filepath.Join(peer, "notes"), "needle in a peer\n")
	writeFile(t, key, "needle in a key\n")
	writeFile(t, filepath.Join(env.Cwd, "mine"), "needle of my own\n")
	env.Sandbox = sandbox.NewBox(sandbox.Policy{Mode: sandbox.WorkspaceWrite, Writable: []string{env.Cwd, env.TempDir},
		Hidden: []string{data, key}}, "/proc/self/exe")
	env.Sandbox.SetPeers(func() []string { return []string{peer} })
	const hides = "the sandbox hides it"
	for _, p := range []string{filepath.Join(data, "sessions", "s.jsonl"), filepath.Join(peer, "notes"), key} {
		mustErr(t, run(t, NewRead(env), map[string]any{"path": p}), hides)
		mustErr(t, run(t, NewEdit(env), map[string]any{"path": p, "edits": []map[string]any{{"oldText": "needle", "newText": "pin"}}}), "Cannot")
		mustErr(t, run(t, NewWrite(env), map[string]any{"path": p, "content": "x"}), "Cannot")
	}
	for _, d := range []string{data, filepath.Join(data, "sessions"), peer} {
		mustErr(t, run(t, NewLs(env), map[string]any{"path": d}), hides)
		mustErr(t, run(t, NewFind(env), map[string]any{"pattern": "*", "path": d}), hides)
		mustErr(t, run(t, NewGrep(env), map[string]any{"pattern": "needle", "path": d}), hides)
	}
	if got := mustOK(t, run(t, NewRead(env), map[string]any{"path": "mine"})); !strings.Contains(got, "needle of my own") {
		t.Fatalf("reading the session's own file: %s", got)
	}
	got := mustOK(t, run(t, NewGrep(env), map[string]any{"pattern": "needle", "path": root}))
	if !strings.Contains(got, "needle of my own") || strings.Contains(got, "transcript") || strings.Contains(got, "peer") || strings.Contains(got, "key") {
		t.Fatalf("grep of a tree holding hidden paths: %s", got)
	}
	got = mustOK(t, run(t, NewFind(env), map[string]any{"pattern": "*", "path": root}))
	if !strings.Contains(got, "mine") || strings.Contains(got, "s.jsonl") || strings.Contains(got, "notes") || strings.Contains(got, "key") {
		t.Fatalf("find in a tree holding hidden paths: %s", got)
	}
}

// An approved escalation reruns the command with exactly the access the
// question named. Approving "write outside the workspace" gives no
// network (on main it made the rerun full-access); in read-only,
// approving "write files in the workspace" gives no write outside it.
// The rerun starts the command over, and the model is told so.
func TestSandboxEscalationGrantsOnlyWhatItNames(t *testing.T) {
	needLandlock(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	defer wg.Wait()
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	for _, answer := range []sandbox.Answer{sandbox.Once, sandbox.Always} {
		t.Run(fmt.Sprintf("workspace-write/%v", answer), func(t *testing.T) {
			env, d := sandboxEnv(t, sandbox.WorkspaceWrite, false, true)
			var asked []sandbox.Request
			env.Sandbox.SetAsker(func(_ context.Context, r sandbox.Request) (sandbox.Answer, error) {
				asked = append(asked, r)
				return answer, nil
			})
			// The first attempt stops at the write; the rerun, allowed to
			// write, goes on to connect, which it was not allowed.
			target := filepath.Join(d.outside, "f")
			cmd := fmt.Sprintf(`echo run >> %s/runs && echo hi > %s && bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' && echo connected`, d.work, target, port)
			r := runBash(t, context.Background(), NewBash(env), map[string]any{"command": cmd}, nil)
			if len(asked) != 1 || asked[0].Need != (sandbox.Need{Write: true}) || asked[0].Need.Describe(asked[0].Policy) != "write outside the workspace" {
				t.Fatalf("asked %+v, want one question to write outside the workspace", asked)
			}
			if !fileExists(target) {
				t.Fatalf("the approved write did not happen: %s", textOf(r.res))
			}
			if strings.Contains(textOf(r.res), "connected") {
				t.Fatalf("approving a write gave the rerun the network: %s", textOf(r.res))
			}
			if runs, _ := os.ReadFile(filepath.Join(d.work, "runs")); string(runs) != "run\nrun\n" {
				t.Fatalf("runs %q: the rerun starts the command over", runs)
			}
			if !strings.Contains(textOf(r.res), "run again from the start") {
				t.Fatalf("the model should be told the command ran again from the start: %s", textOf(r.res))
			}
			p := env.Sandbox.Policy()
			if p.Network || !p.Confined() {
				t.Fatalf("the session's policy became %+v", p)
			}
			if got := p.AllowsWrite(d.outside); got != (answer == sandbox.Always) {
				t.Fatalf("session writes outside = %v after %v", got, answer)
			}
		})
	}
	t.Run("read-only", func(t *testing.T) {
		env, d := sandboxEnv(t, sandbox.ReadOnly, false, true)
		var asked []sandbox.Request
		env.Sandbox.SetAsker(func(_ context.Context, r sandbox.Request) (sandbox.Answer, error) {
			asked = append(asked, r)
			return sandbox.Once, nil
		})
		inside, outside := filepath.Join(d.work, "in"), filepath.Join(d.outside, "out")
		r := runBash(t, context.Background(), NewBash(env), map[string]any{"command": "touch " + inside + " && touch " + outside}, nil)
		if len(asked) != 1 || asked[0].Need.Describe(asked[0].Policy) != "write files in the workspace" {
			t.Fatalf("asked %+v, want one question to write files in the workspace", asked)
		}
		if !fileExists(inside) {
			t.Fatalf("the approved write in the workspace did not happen: %s", textOf(r.res))
		}
		if fileExists(outside) {
			t.Fatalf("approving writes in read-only wrote outside the workspace: %s", textOf(r.res))
		}
		if !r.res.IsError {
			t.Fatalf("the rerun's refused write should fail the command: %s", textOf(r.res))
		}
	})
}

package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestDiagnose(t *testing.T) {
	ws := Policy{Mode: WorkspaceWrite, Writable: []string{"/w"}}
	cases := []struct {
		name   string
		policy Policy
		output string
		want   Need
	}{
		{"write refused", ws, "bash: line 1: /home/u/x: Permission denied", Need{Write: true}},
		{"touch refused", ws, "touch: cannot touch '/etc/x': Permission denied", Need{Write: true}},
		{"connect refused", ws, "bash: connect: Permission denied\nbash: /dev/tcp/127.0.0.1/80: Permission denied", Need{Network: true}},
		{"curl refused", ws, "curl: (7) Failed to connect to example.com port 443: Permission denied", Need{Network: true}},
		{"network allowed, so a write", Policy{Mode: WorkspaceWrite, Network: true}, "connect: Permission denied", Need{Write: true}},
		{"ordinary failure", ws, "make: *** No rule to make target 'x'.  Stop.", Need{}},
		{"full access never", Policy{Mode: FullAccess}, "Permission denied", Need{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Diagnose(c.policy, c.output); got != c.want {
				t.Fatalf("Diagnose = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestWrapRoundTrip(t *testing.T) {
	cases := []Policy{
		{Mode: ReadOnly},
		{Mode: ReadOnly, Network: true},
		{Mode: WorkspaceWrite, Writable: []string{"/a b", "/tmp"}},
	}
	for _, p := range cases {
		argv := p.Wrap("/proc/self/exe", []string{"/bin/sh", "-c", "echo --mode"})
		if argv[0] != "/proc/self/exe" || argv[1] != Command {
			t.Fatalf("Wrap = %q", argv)
		}
		got, cmd, err := parseArgs(argv[2:])
		if err != nil {
			t.Fatal(err)
		}
		if got.Mode != p.Mode || got.Network != p.Network || !slices.Equal(got.Writable, p.Writable) || !slices.Equal(cmd, []string{"/bin/sh", "-c", "echo --mode"}) {
			t.Fatalf("round trip of %+v: %+v %q", p, got, cmd)
		}
	}
	if argv := (Policy{Mode: FullAccess}).Wrap("/x", []string{"sh"}); !slices.Equal(argv, []string{"sh"}) {
		t.Fatalf("full access wrapped: %q", argv)
	}
	for _, bad := range [][]string{{"--mode", "nope", "--", "sh"}, {"--", "sh"}, {"--mode", "read-only"}, {"--mode", "read-only", "--"}, {"--what"}} {
		if _, _, err := parseArgs(bad); err == nil {
			t.Errorf("parseArgs(%q) accepted", bad)
		}
	}
}

func TestRealPathAndAllowsWrite(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	work, out := filepath.Join(root, "work"), filepath.Join(root, "out")
	for _, d := range []string{work, out} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(out, filepath.Join(work, "dirlink")))
	must(os.Symlink(filepath.Join(out, "new"), filepath.Join(work, "dangling")))
	must(os.Symlink("dangling", filepath.Join(work, "chain")))
	p := Policy{Mode: WorkspaceWrite, Writable: []string{work}}
	cases := []struct {
		path    string
		allowed bool
	}{
		{filepath.Join(work, "a"), true},
		{filepath.Join(work, "new/dir/a"), true},
		{filepath.Join(work, "dirlink/a"), false},
		{filepath.Join(work, "dangling"), false},
		{filepath.Join(work, "chain"), false},
		{filepath.Join(work, "../out/a"), false},
		{work + "x/a", false},
		{work, true},
	}
	for _, c := range cases {
		real, err := RealPath(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.AllowsWrite(real); got != c.allowed {
			t.Errorf("AllowsWrite(%s → %s) = %v, want %v", c.path, real, got, c.allowed)
		}
		if (Policy{Mode: ReadOnly}).AllowsWrite(real) {
			t.Errorf("read-only allows %s", real)
		}
	}
}

func TestStricter(t *testing.T) {
	if !ReadOnly.Stricter(WorkspaceWrite) || !WorkspaceWrite.Stricter(FullAccess) || FullAccess.Stricter(ReadOnly) || WorkspaceWrite.Stricter(WorkspaceWrite) {
		t.Fatal("modes out of order")
	}
}

func TestChoose(t *testing.T) {
	tests := []struct {
		base    Mode
		want    string
		got     Mode
		refusal string
	}{
		{WorkspaceWrite, "", WorkspaceWrite, ""},
		{WorkspaceWrite, "read-only", ReadOnly, ""},
		{WorkspaceWrite, "workspace-write", WorkspaceWrite, ""},
		{WorkspaceWrite, "full-access", "", "Sandbox mode full-access is not allowed: this server runs tools in workspace-write, and a session may only choose that or a stricter mode; sandbox must be read-only or workspace-write"},
		{WorkspaceWrite, "none", "", `Unknown sandbox mode "none": sandbox must be read-only or workspace-write`},
		{WorkspaceWrite, "Read-Only", "", `Unknown sandbox mode "Read-Only": sandbox must be read-only or workspace-write`},
		{ReadOnly, "workspace-write", "", "Sandbox mode workspace-write is not allowed: this server runs tools in read-only, and a session may only choose that or a stricter mode; sandbox must be read-only"},
		{FullAccess, "x", "", `Unknown sandbox mode "x": sandbox must be read-only, workspace-write or full-access`},
		{"", "full-access", FullAccess, ""},
		{"", "", FullAccess, ""},
	}
	for _, tc := range tests {
		got, err := Choose(tc.base, tc.want)
		msg := ""
		if err != nil {
			msg = err.Error()
			var ce *ChoiceError
			if !errors.As(err, &ce) {
				t.Errorf("Choose(%s, %q): %T, want a *ChoiceError", tc.base, tc.want, err)
			}
		}
		if got != tc.got || msg != tc.refusal {
			t.Errorf("Choose(%s, %q) = %q, %q; want %q, %q", tc.base, tc.want, got, msg, tc.got, tc.refusal)
		}
	}
}

func TestScrub(t *testing.T) {
	in := []string{"PATH=/bin", "ANTHROPIC_API_KEY=a", "OPENAI_API_KEY=b", "MOCK_API_KEY=c", "AGENTD_TOKEN=d", "HOME=/h",
		"GITHUB_TOKEN=e", "AWS_SECRET_ACCESS_KEY=f", "ANTHROPIC_AUTH_TOKEN=g", "DB_PASSWORD=h", "client_secret=i",
		"GOOGLE_APPLICATION_CREDENTIALS=/k.json", "my_key=j", "NPM_TOKEN=k", "GITLAB_PAT=l", "OPENAI_APIKEY=m",
		"TOKEN=n", "KEYBOARD=us", "TERM=xterm", "SSH_AUTH_SOCK=/s", "LANG=C", "NPM_TOKEN_ALLOWED=o"}
	got := Scrub(in, "NPM_TOKEN", "HOME", "nonexistent")
	want := []string{"PATH=/bin", "HOME=/h", "NPM_TOKEN=k", "KEYBOARD=us", "TERM=xterm", "SSH_AUTH_SOCK=/s", "LANG=C", "NPM_TOKEN_ALLOWED=o"}
	if !slices.Equal(got, want) {
		t.Fatalf("Scrub = %q, want %q", got, want)
	}
}

// Widen grants exactly what Need.Describe names: writes never bring the
// network, read-only's "write files in the workspace" never reaches past
// the workspace, and the policy stays confined.
func TestWidenGrantsWhatItSays(t *testing.T) {
	ws := []string{"/work/space", "/tmp"}
	type probe struct {
		path  string
		write bool
	}
	cases := []struct {
		name    string
		from    Policy
		need    Need
		says    string
		network bool
		writes  []probe
	}{
		{"workspace-write, write outside", Policy{Mode: WorkspaceWrite, Writable: ws}, Need{Write: true}, "write outside the workspace", false,
			[]probe{{"/work/space/f", true}, {"/home/u/f", true}, {"/etc/f", true}}},
		{"read-only, write files", Policy{Mode: ReadOnly, Writable: ws}, Need{Write: true}, "write files in the workspace", false,
			[]probe{{"/work/space/f", true}, {"/tmp/f", true}, {"/home/u/f", false}, {"/etc/f", false}}},
		{"workspace-write, network", Policy{Mode: WorkspaceWrite, Writable: ws}, Need{Network: true}, "use the network", true,
			[]probe{{"/work/space/f", true}, {"/home/u/f", false}}},
		{"read-only, network", Policy{Mode: ReadOnly, Writable: ws}, Need{Network: true}, "use the network", true,
			[]probe{{"/work/space/f", false}}},
		{"workspace-write, both", Policy{Mode: WorkspaceWrite, Writable: ws}, Need{Write: true, Network: true}, "write outside the workspace and use the network", true,
			[]probe{{"/home/u/f", true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.need.Describe(c.from); got != c.says {
				t.Errorf("the question says %q, want %q", got, c.says)
			}
			w := c.from.Widen(c.need)
			if !w.Confined() {
				t.Fatalf("widened to %+v: no longer confined", w)
			}
			if w.Network != c.network {
				t.Errorf("network = %v, want %v (%+v)", w.Network, c.network, w)
			}
			for _, p := range c.writes {
				if got := w.AllowsWrite(p.path); got != p.write {
					t.Errorf("write %s allowed = %v, want %v (%+v)", p.path, got, p.write, w)
				}
			}
			if c.from.Writable[0] != ws[0] || len(c.from.Writable) != len(ws) {
				t.Errorf("Widen changed the policy it was given: %+v", c.from)
			}
		})
	}
}

// A session's policy hides the other live sessions' workspaces, except
// one that holds the session's own directories (hiding it would hide
// them) or is the same.
func TestBoxHidesPeers(t *testing.T) {
	b := NewBox(Policy{Mode: WorkspaceWrite, Writable: []string{"/srv/ws/alice", "/tmp"}, Hidden: []string{"/data"}}, "/x")
	b.SetPeers(func() []string {
		return []string{"/srv/ws/bob", "/srv/ws/alice", "/srv", "/srv/ws/alice/sub", "/tmp/agentd-spill-1"}
	})
	want := []string{"/data", "/srv/ws/bob", "/srv/ws/alice/sub", "/tmp/agentd-spill-1"}
	if got := b.Policy().Hidden; !slices.Equal(got, want) {
		t.Fatalf("Hidden = %q, want %q", got, want)
	}
	if got := b.Policy().Hidden; !slices.Equal(got, want) {
		t.Fatalf("a second Policy = %q: the peers were added twice", got)
	}
}

// AllowsRead follows the mounts: the deepest of the hidden paths and the
// session's own directories that holds a path decides.
func TestAllowsRead(t *testing.T) {
	p := Policy{Mode: WorkspaceWrite, Writable: []string{"/data/ws/own", "/tmp"}, Hidden: []string{"/data", "/cfg", "/data/ws/own/.keys", "/key"}}
	cases := map[string]bool{
		"/data": false, "/data/sessions/s.jsonl": false, "/data/ws": false, "/data/ws/own": true, "/data/ws/own/f": true,
		"/data/ws/own/.keys/k": false, "/cfg/models.json": false, "/key": false, "/keyboard": true, "/etc/passwd": true,
		"/tmp/x": true, "/datax": true,
	}
	for path, want := range cases {
		if got := p.AllowsRead(path); got != want {
			t.Errorf("AllowsRead(%s) = %v, want %v", path, got, want)
		}
	}
	if !(Policy{Mode: FullAccess, Hidden: []string{"/data"}}).AllowsRead("/data/x") {
		t.Error("full access hides")
	}
	if !p.ShowsWithin("/data/ws") || p.ShowsWithin("/cfg") {
		t.Error("ShowsWithin")
	}
}

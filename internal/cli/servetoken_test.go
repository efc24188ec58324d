package cli

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentd-dev/agentd/internal/config"
)

func TestNetworkToken(t *testing.T) {
	serve := func(mode string, network bool, token, jwt string) config.Serve {
		sc := config.Serve{Token: token, JWTSecretFile: jwt}
		sc.Engine.Sandbox = config.Sandbox{Mode: mode, Network: network}
		return sc
	}
	tests := []struct {
		name     string
		sc       config.Serve
		made     bool
		keepsOld string
	}{
		{"network, nothing given", serve("workspace-write", true, "", ""), true, ""},
		{"read-only with network", serve("read-only", true, "", ""), true, ""},
		{"no network", serve("workspace-write", false, "", ""), false, ""},
		{"full access", serve("full-access", true, "", ""), false, ""},
		{"a token given", serve("workspace-write", true, "given-token-0123456789", ""), false, "given-token-0123456789"},
		{"JWT keys given", serve("workspace-write", true, "", "/some/secret"), false, ""},
	}
	log := slog.New(slog.DiscardHandler)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			sc := tt.sc
			if err := networkToken(&sc, dir, log); err != nil {
				t.Fatal(err)
			}
			_, statErr := os.Stat(filepath.Join(dir, TokenFile))
			if made := statErr == nil; made != tt.made {
				t.Fatalf("token file made = %v", made)
			}
			if !tt.made {
				if sc.Token != tt.keepsOld {
					t.Fatalf("token %q", sc.Token)
				}
				return
			}
			if len(sc.Token) < config.MinTokenLength {
				t.Fatalf("token %q", sc.Token)
			}
			// The next start uses the same token.
			again := tt.sc
			if err := networkToken(&again, dir, log); err != nil || again.Token != sc.Token {
				t.Fatalf("restart: %q %v, want %q", again.Token, err, sc.Token)
			}
		})
	}
	pp := serve("workspace-write", true, "given-token-0123456789", "")
	pp.PprofAddr = "127.0.0.1:0"
	if err := networkToken(&pp, t.TempDir(), log); err == nil {
		t.Fatal("the profiler was allowed beside --sandbox-network")
	}
	// A token file with no usable token is an error, not an open door.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, TokenFile), []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := serve("workspace-write", true, "", "")
	if err := networkToken(&sc, dir, log); err == nil {
		t.Fatal("an empty token file was accepted")
	}
}

package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentd-dev/agentd/internal/atomicfile"
	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/server"
)

// TokenFile is where agentd serve keeps the token it made itself, in
// its state directory (<data-dir>/server).
const TokenFile = "token"

// networkToken makes a token mandatory where confined tools may use the
// network: on loopback a server without one lets in every local
// process, and a confined bash with --sandbox-network is one; it would
// create a session and run commands there unconfined. When no token and
// no JWT keys were given, one is made (once, kept 0600 in stateDir and
// used again at the next start) and the log says where it is. The token
// is never put in the environment or on a command line, so tools cannot
// read it there.
func networkToken(sc *config.Serve, stateDir string, log *slog.Logger) error {
	p := policyOf(sc.Engine.Sandbox)
	if p.Confined() && p.Network && sc.PprofAddr != "" {
		// The profiler takes no token, and its cmdline page shows --token.
		return fmt.Errorf("--pprof-addr with --sandbox-network: tools may then connect to the profiling listener, which asks no token and shows agentd's command line; profile without --sandbox-network, or with --sandbox full-access")
	}
	if sc.Stdio || sc.Token != "" || sc.JWTSecretFile != "" || sc.JWTKeys != "" || !p.Confined() || !p.Network {
		return nil
	}
	path := filepath.Join(stateDir, TokenFile)
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		sc.Token = strings.TrimSpace(string(data))
		if len(sc.Token) < config.MinTokenLength {
			return fmt.Errorf("%s holds no usable token (delete it to have a new one made, or give --token)", path)
		}
	case errors.Is(err, fs.ErrNotExist):
		tok := server.NewToken()
		if err := atomicfile.Create(path, []byte(tok+"\n")); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("token file: %w", err)
		} else if err != nil {
			// Another agentd made it first: use that one.
			return networkToken(sc, stateDir, log)
		}
		sc.Token = tok
	default:
		return fmt.Errorf("token file: %w", err)
	}
	log.Warn("tools may use the network (--sandbox-network), so clients must present a token, even on loopback; none was given: clients use the one in the token file",
		"token_file", path)
	return nil
}

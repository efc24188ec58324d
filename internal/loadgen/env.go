package loadgen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// serveArgs are the server's flags in env, with room for conns
// connections.
func serveArgs(o Options, env benchEnv, conns int) []string {
	args := []string{"serve", "--port", "0",
		"--config-dir", env.config, "--data-dir", env.data,
		"--model", "mock/mock-model",
		"--max-sessions", strconv.Itoa(o.Sessions + o.IdleSessions + 10),
		"--max-connections", strconv.Itoa(conns),
		"--rate-limit", "0", "--global-rate-limit", "0",
		// The ready line is logged at info; agentd serve logs nothing
		// per command at info, so this costs the server nothing.
		"--log-level", "info", "--log-format", "text"}
	if o.StreamFormat != "" {
		args = append(args, "--stream-format", o.StreamFormat)
	}
	return append(args, o.ServerArgs...)
}

// benchEnv is the server's temporary world.
type benchEnv struct {
	config, data, work string
	environ            []string
}

// writeEnv makes the config, data, work and home directories under dir
// and a models.json whose only provider is the mock.
func writeEnv(dir, baseURL string) (benchEnv, error) {
	e := benchEnv{config: filepath.Join(dir, "config"), data: filepath.Join(dir, "data"), work: filepath.Join(dir, "work")}
	home := filepath.Join(dir, "home")
	for _, d := range []string{e.config, e.data, e.work, home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return e, fmt.Errorf("bench dirs: %w", err)
		}
	}
	models := map[string]any{"providers": map[string]any{"mock": map[string]any{
		"baseUrl": baseURL, "api": "openai-completions", "apiKey": "bench",
		"models": []any{map[string]any{
			"id": "mock-model", "name": "Mock Model", "reasoning": false, "input": []string{"text"},
			"cost":          map[string]float64{"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0},
			"contextWindow": 128000, "maxTokens": 4096,
			"compat": map[string]bool{"supportsDeveloperRole": false, "supportsReasoningEffort": false},
		}},
	}}}
	b, err := json.MarshalIndent(models, "", "  ")
	if err != nil {
		return e, fmt.Errorf("models.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(e.config, "models.json"), b, 0o600); err != nil {
		return e, fmt.Errorf("models.json: %w", err)
	}
	// The server must not pick up the user's agentd settings (a token
	// would make it demand one) or their home's configuration.
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AGENTD_") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		e.environ = append(e.environ, kv)
	}
	e.environ = append(e.environ, "HOME="+home)
	return e, nil
}

package registry

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
)

func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// writeConfig writes an agentd models.json into a fresh config dir and
// returns the dir and the file's path.
func writeConfig(t *testing.T, content string) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "models.json")
	if content != "" {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, path
}

func mustFind(t *testing.T, r *Registry, provider, id string) Entry {
	t.Helper()
	e, ok := r.Find(provider, id)
	if !ok {
		t.Fatalf("model %s/%s not in registry; have %v", provider, id, ids(r))
	}
	return e
}

func ids(r *Registry) []string {
	var out []string
	for _, e := range r.All() {
		out = append(out, e.Model.Provider+"/"+e.Model.ID)
	}
	return out
}

func boolp(v bool) *bool { return &v }

func TestCatalog(t *testing.T) {
	seen := map[string]bool{}
	providers := map[string]bool{}
	for _, m := range Catalog() {
		key := m.Provider + "/" + m.ID
		t.Run(key, func(t *testing.T) {
			if seen[key] {
				t.Fatalf("duplicate model")
			}
			seen[key] = true
			providers[m.Provider] = true
			bp, ok := findBuiltinProvider(m.Provider)
			if !ok {
				t.Fatalf("provider %q is not a built-in provider", m.Provider)
			}
			if m.API != bp.api || m.BaseURL != bp.baseURL {
				t.Errorf("api/baseUrl = %s %s, want %s %s", m.API, m.BaseURL, bp.api, bp.baseURL)
			}
			if m.ID == "" || m.Name == "" {
				t.Errorf("id %q name %q must be set", m.ID, m.Name)
			}
			if m.Cost.Input <= 0 || m.Cost.Output <= m.Cost.Input || m.Cost.CacheRead <= 0 || m.Cost.CacheRead >= m.Cost.Input {
				t.Errorf("implausible prices %+v", m.Cost)
			}
			if m.Provider == ProviderAnthropic && m.Cost.CacheWrite <= m.Cost.Input {
				t.Errorf("anthropic cache writes cost more than input: %+v", m.Cost)
			}
			if m.ContextWindow < 100000 || m.MaxTokens <= 0 || m.MaxTokens > m.ContextWindow {
				t.Errorf("contextWindow %d maxTokens %d", m.ContextWindow, m.MaxTokens)
			}
			if len(m.Input) == 0 || m.Input[0] != "text" {
				t.Errorf("input %v must start with text", m.Input)
			}
			c := m.CompatOrDefault()
			// pi gives xhigh to gpt-5.2+ and Opus 4.6+, adaptive thinking to the 4.6+ generation.
			wantXHigh := strings.Contains(m.ID, "opus-4-6") || strings.Contains(m.ID, "opus-4-7") ||
				strings.HasPrefix(m.ID, "gpt-5.2") || strings.HasPrefix(m.ID, "gpt-5.3") ||
				strings.HasPrefix(m.ID, "gpt-5.4") || strings.HasPrefix(m.ID, "gpt-5.5")
			if got := llm.Flag(c.SupportsXHigh, false); got != wantXHigh {
				t.Errorf("SupportsXHigh = %v, want %v", got, wantXHigh)
			}
			wantAdaptive := strings.Contains(m.ID, "-4-6") || strings.Contains(m.ID, "-4-7")
			if got := llm.Flag(c.AdaptiveThinking, false); got != wantAdaptive {
				t.Errorf("AdaptiveThinking = %v, want %v", got, wantAdaptive)
			}
			if wantXHigh && !m.Reasoning {
				t.Errorf("xhigh on a model without reasoning")
			}
		})
	}
	if n := len(seen); n < 8 || n > 15 {
		t.Errorf("catalog has %d models, want 8-15", n)
	}
	if !providers[ProviderAnthropic] || !providers[ProviderOpenAI] {
		t.Errorf("catalog providers = %v", providers)
	}
	// Catalog hands out copies.
	a := Catalog()
	a[0].Name = "changed"
	*a[0].Compat.SupportsXHigh = false
	if b := Catalog(); b[0].Name == "changed" || !*b[0].Compat.SupportsXHigh {
		t.Error("Catalog returned shared data")
	}
}

func TestLoadModelsJSON(t *testing.T) {
	type check func(t *testing.T, r *Registry, path, piPath string)
	tests := []struct {
		name  string
		own   string
		pi    string
		env   map[string]string
		check check
	}{
		{
			name: "full custom provider",
			own: `{"providers": {"acme": {
				"baseUrl": "https://llm.acme.example/v1/",
				"api": "openai-completions",
				"apiKey": "sk-acme",
				"headers": {"X-Team": "core"},
				"authHeader": true,
				"compat": {"supportsDeveloperRole": false, "maxTokensField": "max_tokens"},
				"models": [{
					"id": "acme-large", "name": "Acme Large", "reasoning": true,
					"input": ["text", "image"],
					"cost": {"input": 1, "output": 2, "cacheRead": 0.1, "cacheWrite": 0.2},
					"contextWindow": 200000, "maxTokens": 8000,
					"headers": {"X-Model": "large"},
					"compat": {"supportsReasoningEffort": true}
				}]
			}}}`,
			check: func(t *testing.T, r *Registry, path, _ string) {
				e := mustFind(t, r, "acme", "acme-large")
				want := llm.Model{
					ID: "acme-large", Name: "Acme Large", API: llm.APIOpenAICompletions, Provider: "acme",
					BaseURL: "https://llm.acme.example/v1", Reasoning: true, Input: []string{"text", "image"},
					Cost:          llm.ModelCost{Input: 1, Output: 2, CacheRead: 0.1, CacheWrite: 0.2},
					ContextWindow: 200000, MaxTokens: 8000,
					Compat: &llm.Compat{SupportsDeveloperRole: boolp(false), MaxTokensField: "max_tokens", SupportsReasoningEffort: boolp(true)},
				}
				if !reflect.DeepEqual(*e.Model, want) {
					t.Errorf("model =\n%+v\nwant\n%+v", *e.Model, want)
				}
				if !e.Available || e.Source != path {
					t.Errorf("available %v source %q, want true %q", e.Available, e.Source, path)
				}
				key, headers, err := r.Auth(context.Background(), e.Model)
				if err != nil {
					t.Fatal(err)
				}
				wantHeaders := map[string]string{"X-Team": "core", "X-Model": "large", "Authorization": "Bearer sk-acme"}
				if key != "sk-acme" || !reflect.DeepEqual(headers, wantHeaders) {
					t.Errorf("Auth = %q %v, want sk-acme %v", key, headers, wantHeaders)
				}
			},
		},
		{
			name: "minimal model takes pi's defaults",
			own:  `{"providers": {"ollama": {"baseUrl": "http://localhost:11434/v1", "api": "openai-completions", "models": [{"id": "llama3.1:8b"}]}}}`,
			check: func(t *testing.T, r *Registry, _, _ string) {
				e := mustFind(t, r, "ollama", "llama3.1:8b")
				want := llm.Model{
					ID: "llama3.1:8b", Name: "llama3.1:8b", API: llm.APIOpenAICompletions, Provider: "ollama",
					BaseURL: "http://localhost:11434/v1", Input: []string{"text"},
					ContextWindow: 128000, MaxTokens: 16384,
				}
				if !reflect.DeepEqual(*e.Model, want) {
					t.Errorf("model =\n%+v\nwant\n%+v", *e.Model, want)
				}
				if !e.Available {
					t.Errorf("local model without key unavailable: %s", e.Reason)
				}
			},
		},
		{
			name: "entry without models overrides a built-in provider",
			own:  `{"providers": {"anthropic": {"baseUrl": "https://proxy.example/anthropic", "apiKey": "sk-proxy", "headers": {"X-Proxy": "1"}}}}`,
			env:  map[string]string{"ANTHROPIC_API_KEY": "sk-env"},
			check: func(t *testing.T, r *Registry, _, _ string) {
				n := 0
				for _, e := range r.All() {
					if e.Model.Provider != ProviderAnthropic {
						continue
					}
					n++
					if e.Model.BaseURL != "https://proxy.example/anthropic" || e.Source != SourceBuiltin || !e.Available {
						t.Errorf("%s: baseUrl %q source %q available %v", e.Model.ID, e.Model.BaseURL, e.Source, e.Available)
					}
				}
				if n != 6 {
					t.Errorf("%d anthropic models, want all 6 built-in ones", n)
				}
				key, headers, err := r.Auth(context.Background(), mustFind(t, r, "anthropic", "claude-opus-4-7").Model)
				if err != nil || key != "sk-proxy" || headers["X-Proxy"] != "1" {
					t.Errorf("Auth = %q %v %v; models.json apiKey must win over the environment", key, headers, err)
				}
				if e := mustFind(t, r, "openai", "gpt-5.4"); e.Model.BaseURL != openAIBaseURL {
					t.Errorf("openai touched: %q", e.Model.BaseURL)
				}
			},
		},
		{
			name: "models in a built-in provider add to and replace built-ins",
			own: `{"providers": {"anthropic": {"models": [
				{"id": "claude-next", "reasoning": true},
				{"id": "claude-haiku-4-5", "name": "Haiku (mine)", "maxTokens": 1000}
			]}}}`,
			env: map[string]string{"ANTHROPIC_API_KEY": "sk-env"},
			check: func(t *testing.T, r *Registry, path, _ string) {
				e := mustFind(t, r, "anthropic", "claude-next")
				if e.Model.API != llm.APIAnthropicMessages || e.Model.BaseURL != anthropicBaseURL || e.Source != path || !e.Available {
					t.Errorf("claude-next = %+v source %q available %v", *e.Model, e.Source, e.Available)
				}
				h := mustFind(t, r, "anthropic", "claude-haiku-4-5")
				if h.Model.Name != "Haiku (mine)" || h.Model.MaxTokens != 1000 || h.Source != path {
					t.Errorf("replaced haiku = %+v from %q", *h.Model, h.Source)
				}
			},
		},
		{
			name: "modelOverrides adjust one built-in model",
			own:  `{"providers": {"openai": {"modelOverrides": {"gpt-5.4": {"name": "GPT-5.4 (team)", "cost": {"input": 1}, "compat": {"supportsXHigh": false}}}}}}`,
			check: func(t *testing.T, r *Registry, _, _ string) {
				m := mustFind(t, r, "openai", "gpt-5.4").Model
				if m.Name != "GPT-5.4 (team)" || m.Cost.Input != 1 || m.Cost.Output != 15 || m.CompatOrDefault().SupportsXHigh == nil || *m.CompatOrDefault().SupportsXHigh {
					t.Errorf("overridden gpt-5.4 = %+v compat %+v", *m, m.CompatOrDefault())
				}
				if other := mustFind(t, r, "openai", "gpt-5.5").Model; other.Name != "GPT-5.5" {
					t.Errorf("override leaked to gpt-5.5: %q", other.Name)
				}
			},
		},
		{
			name: "pi file is merged and agentd's file wins",
			pi: `{"providers": {"ollama": {"baseUrl": "http://localhost:11434/v1", "api": "openai-completions", "apiKey": "from-pi",
				"models": [{"id": "a"}, {"id": "b", "name": "B (pi)"}]}}}`,
			own: `{"providers": {"ollama": {"baseUrl": "http://127.0.0.1:11434/v1",
				"models": [{"id": "b", "name": "B (agentd)"}, {"id": "c"}]}}}`,
			check: func(t *testing.T, r *Registry, path, piPath string) {
				want := map[string]struct{ name, source string }{
					"a": {"a", piPath}, "b": {"B (agentd)", path}, "c": {"c", path},
				}
				for id, w := range want {
					e := mustFind(t, r, "ollama", id)
					if e.Model.Name != w.name || e.Source != w.source || e.Model.BaseURL != "http://127.0.0.1:11434/v1" || e.Model.API != llm.APIOpenAICompletions {
						t.Errorf("%s: name %q source %q baseUrl %q api %q", id, e.Model.Name, e.Source, e.Model.BaseURL, e.Model.API)
					}
				}
				key, _, err := r.Auth(context.Background(), mustFind(t, r, "ollama", "c").Model)
				if err != nil || key != "from-pi" {
					t.Errorf("Auth = %q %v; pi's apiKey should survive where agentd sets none", key, err)
				}
			},
		},
		{
			name: "forceAdaptiveThinking is read as adaptiveThinking",
			own:  `{"providers": {"proxy": {"baseUrl": "http://localhost:8080", "api": "anthropic-messages", "models": [{"id": "x", "compat": {"forceAdaptiveThinking": true}}]}}}`,
			check: func(t *testing.T, r *Registry, _, _ string) {
				if c := mustFind(t, r, "proxy", "x").Model.CompatOrDefault(); !llm.Flag(c.AdaptiveThinking, false) {
					t.Errorf("compat = %+v", c)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, path := writeConfig(t, tt.own)
			var piPath string
			if tt.pi != "" {
				piPath = filepath.Join(t.TempDir(), "pi-models.json")
				if err := os.WriteFile(piPath, []byte(tt.pi), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r, err := Load(context.Background(), Options{ConfigDir: dir, PiModelsPath: piPath, Env: envOf(tt.env)})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			tt.check(t, r, path, piPath)
		})
	}
}

func TestLoadProblems(t *testing.T) {
	tests := []struct {
		name string
		own  string
		// want are substrings of the one problem reported; the file path
		// is always expected too.
		want []string
		// kept are provider/id pairs that must still be loaded.
		kept []string
	}{
		{
			name: "malformed JSON keeps the built-ins",
			own:  "{\"providers\": {\n  \"x\": {\"baseUrl\": }\n}}",
			want: []string{"malformed JSON at line 2, column 20"},
			kept: []string{"anthropic/claude-opus-4-7", "openai/gpt-5.4"},
		},
		{
			name: "empty file",
			own:  "  \n",
			want: []string{"the file is empty"},
			kept: []string{"anthropic/claude-sonnet-4-6"},
		},
		{
			name: "no providers key",
			own:  `{"provider": {}}`,
			want: []string{"providers: missing"},
		},
		{
			name: "unsupported api drops only that provider",
			own: `{"providers": {
				"bad": {"baseUrl": "https://g.example", "api": "google-generative-ai", "models": [{"id": "gemini"}]},
				"good": {"baseUrl": "http://localhost:1234/v1", "api": "openai-completions", "models": [{"id": "m"}]}}}`,
			want: []string{`provider "bad": api: unsupported api "google-generative-ai"`, "openai-completions"},
			kept: []string{"good/m"},
		},
		{
			name: "unsupported api on one model drops that model",
			own: `{"providers": {"p": {"baseUrl": "http://localhost:1234/v1", "api": "openai-completions",
				"models": [{"id": "x", "api": "bedrock-converse-stream"}, {"id": "y"}]}}}`,
			want: []string{`provider "p": model "x": api: unsupported api`},
			kept: []string{"p/y"},
		},
		{
			name: "model without id",
			own:  `{"providers": {"p": {"baseUrl": "http://localhost:1234/v1", "api": "openai-completions", "models": [{"name": "nameless"}, {"id": "ok"}]}}}`,
			want: []string{`provider "p": model "models[0]": id: missing`},
			kept: []string{"p/ok"},
		},
		{
			name: "field of the wrong type names model and field",
			own:  `{"providers": {"p": {"baseUrl": "http://localhost:1234/v1", "api": "openai-completions", "models": [{"id": "m1", "contextWindow": "big"}]}}}`,
			want: []string{`model "m1": contextWindow: expected a number, found JSON string`},
		},
		{
			name: "non-positive maxTokens",
			own:  `{"providers": {"p": {"baseUrl": "http://localhost:1234/v1", "api": "openai-completions", "models": [{"id": "m1", "maxTokens": 0}]}}}`,
			want: []string{`model "m1": maxTokens: must be a positive whole number`},
		},
		{
			name: "unknown input kind",
			own:  `{"providers": {"p": {"baseUrl": "http://localhost:1234/v1", "api": "openai-completions", "models": [{"id": "m1", "input": ["text", "audio"]}]}}}`,
			want: []string{`model "m1": input: unknown input kind "audio"`},
		},
		{
			name: "custom provider without baseUrl",
			own:  `{"providers": {"p": {"api": "openai-completions", "apiKey": "k", "models": [{"id": "m"}]}}}`,
			want: []string{`provider "p": baseUrl: missing`},
		},
		{
			name: "bad baseUrl",
			own:  `{"providers": {"p": {"baseUrl": "localhost:1234", "api": "openai-completions", "models": [{"id": "m"}]}}}`,
			want: []string{`provider "p": baseUrl: "localhost:1234" is not an http(s) URL`},
		},
		{
			name: "no api anywhere",
			own:  `{"providers": {"p": {"baseUrl": "http://localhost:1234/v1", "models": [{"id": "m"}]}}}`,
			want: []string{`provider "p": model "m": api: missing`},
		},
		{
			name: "misspelt built-in provider",
			own:  `{"providers": {"antropic": {"baseUrl": "https://proxy.example"}}}`,
			want: []string{`provider "antropic": is not a built-in provider`},
			kept: []string{"anthropic/claude-opus-4-7"},
		},
		{
			name: "modelOverrides for an unknown built-in id",
			own:  `{"providers": {"openai": {"modelOverrides": {"gpt-9": {"name": "x"}}}}}`,
			want: []string{`provider "openai": model "gpt-9": modelOverrides: no built-in openai model has this id`},
		},
		{
			name: "bad compat value",
			own:  `{"providers": {"p": {"baseUrl": "http://localhost:1", "api": "openai-completions", "compat": {"maxTokensField": "tokens"}, "models": [{"id": "m"}]}}}`,
			want: []string{`provider "p": compat.maxTokensField: "tokens" is not one of`},
		},
		{
			name: "empty apiKey",
			own:  `{"providers": {"p": {"baseUrl": "http://localhost:1", "api": "openai-completions", "apiKey": "", "models": [{"id": "m"}]}}}`,
			want: []string{`provider "p": apiKey: is empty`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, path := writeConfig(t, tt.own)
			r, err := Load(context.Background(), Options{ConfigDir: dir})
			if r == nil {
				t.Fatalf("Load returned no registry: %v", err)
			}
			if err == nil {
				t.Fatal("Load reported no problem")
			}
			if len(r.Problems()) != 1 {
				t.Fatalf("problems = %q, want exactly one", r.Problems())
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not a *ConfigError", err)
			}
			msg := err.Error()
			for _, w := range append([]string{path}, tt.want...) {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			for _, k := range tt.kept {
				p, id, _ := strings.Cut(k, "/")
				mustFind(t, r, p, id)
			}
		})
	}
}

func TestKeyForms(t *testing.T) {
	tests := []struct {
		name    string
		apiKey  string
		env     map[string]string
		timeout time.Duration
		wantKey string
		// wantReason, when set, means the model must be unavailable with a
		// reason containing all of these.
		wantReason []string
	}{
		{name: "literal", apiKey: "sk-literal", wantKey: "sk-literal"},
		{name: "environment variable name", apiKey: "ACME_KEY", env: map[string]string{"ACME_KEY": "sk-env"}, wantKey: "sk-env"},
		{name: "lower-case name that happens to be set", apiKey: "acme_key", env: map[string]string{"acme_key": "sk-env"}, wantKey: "sk-env"},
		{name: "unset environment variable name", apiKey: "ACME_KEY", wantReason: []string{"no API key", "environment variable ACME_KEY, which is not set"}},
		{name: "command", apiKey: "!printf sk-cmd", wantKey: "sk-cmd"},
		{name: "command output is trimmed", apiKey: "!echo '  sk-trim  '", wantKey: "sk-trim"},
		{name: "command sees the process environment, not Env", apiKey: "!echo \"sk-${ACME_UNSET_IN_TESTS:-shell}\"", env: map[string]string{"ACME_UNSET_IN_TESTS": "env"}, wantKey: "sk-shell"},
		{name: "failing command", apiKey: "!echo 'vault locked' >&2; exit 3", wantReason: []string{"apiKey command failed", "exit status 3", "vault locked"}},
		{name: "command printing nothing", apiKey: "!true", wantReason: []string{"apiKey command failed", "printed nothing"}},
		{name: "command timeout", apiKey: "!sleep 5; echo late", timeout: 100 * time.Millisecond, wantReason: []string{"apiKey command failed", "timed out after 100ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, _ := writeConfig(t, `{"providers": {"acme": {"baseUrl": "https://acme.example/v1", "api": "openai-completions",
				"apiKey": `+jsonString(tt.apiKey)+`, "models": [{"id": "m"}]}}}`)
			start := time.Now()
			r, err := Load(context.Background(), Options{ConfigDir: dir, Env: envOf(tt.env), CommandTimeout: tt.timeout})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if tt.timeout > 0 && time.Since(start) > 3*time.Second {
				t.Errorf("Load took %s despite a %s command timeout", time.Since(start), tt.timeout)
			}
			e := mustFind(t, r, "acme", "m")
			key, _, authErr := r.Auth(context.Background(), e.Model)
			if tt.wantReason == nil {
				if !e.Available || authErr != nil || key != tt.wantKey {
					t.Errorf("available %v (%s), Auth = %q %v; want %q", e.Available, e.Reason, key, authErr, tt.wantKey)
				}
				return
			}
			if e.Available {
				t.Fatalf("model available, want unavailable")
			}
			for _, w := range tt.wantReason {
				if !strings.Contains(e.Reason, w) {
					t.Errorf("reason %q does not contain %q", e.Reason, w)
				}
			}
			if !errors.Is(authErr, ErrUnavailable) {
				t.Errorf("Auth error %v does not wrap ErrUnavailable", authErr)
			}
		})
	}
}

func jsonString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}

func TestCommandCaching(t *testing.T) {
	tests := []struct {
		prefix string
		// runs after Load and two Auth calls.
		wantRuns int
	}{
		{prefix: "!", wantRuns: 1},
		{prefix: "!!", wantRuns: 3},
	}
	for _, tt := range tests {
		t.Run(tt.prefix, func(t *testing.T) {
			counter := filepath.Join(t.TempDir(), "runs")
			cmd := tt.prefix + "echo run >> '" + counter + "'; echo sk-$(wc -l < '" + counter + "' | tr -d ' ')"
			dir, _ := writeConfig(t, `{"providers": {"acme": {"baseUrl": "https://acme.example/v1", "api": "openai-completions",
				"apiKey": `+jsonString(cmd)+`, "models": [{"id": "m1"}, {"id": "m2"}]}}}`)
			r, err := Load(context.Background(), Options{ConfigDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, id := range []string{"m1", "m2"} {
				key, _, err := r.Auth(context.Background(), mustFind(t, r, "acme", id).Model)
				if err != nil {
					t.Fatal(err)
				}
				keys = append(keys, key)
			}
			data, err := os.ReadFile(counter)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(data), "run"); n != tt.wantRuns {
				t.Errorf("command ran %d times, want %d", n, tt.wantRuns)
			}
			if tt.prefix == "!" && keys[1] != "sk-1" {
				t.Errorf("cached key = %q, want sk-1", keys[1])
			}
			if tt.prefix == "!!" && keys[1] != "sk-3" {
				t.Errorf("fresh key = %q, want sk-3", keys[1])
			}
		})
	}
}

func TestAvailability(t *testing.T) {
	anthropicReason := `no API key: set ANTHROPIC_API_KEY or add apiKey to models.json provider "anthropic"`
	openaiReason := `no API key: set OPENAI_API_KEY or add apiKey to models.json provider "openai"`
	tests := []struct {
		name  string
		own   string
		env   map[string]string
		extra []llm.Model
		// want maps provider/id to "" for available, or the exact reason.
		want map[string]string
		// wantKey maps provider/id to the key Auth must return.
		wantKey map[string]string
	}{
		{
			name: "no keys at all",
			want: map[string]string{"anthropic/claude-opus-4-7": anthropicReason, "openai/gpt-5.4": openaiReason},
		},
		{
			name:    "ANTHROPIC_API_KEY",
			env:     map[string]string{"ANTHROPIC_API_KEY": "sk-ant"},
			want:    map[string]string{"anthropic/claude-haiku-4-5": "", "openai/gpt-5.5": openaiReason},
			wantKey: map[string]string{"anthropic/claude-haiku-4-5": "sk-ant"},
		},
		{
			name:    "ANTHROPIC_OAUTH_TOKEN takes precedence as in pi",
			env:     map[string]string{"ANTHROPIC_API_KEY": "sk-ant", "ANTHROPIC_OAUTH_TOKEN": "sk-ant-oat-1"},
			wantKey: map[string]string{"anthropic/claude-opus-4-6": "sk-ant-oat-1"},
		},
		{
			name:    "OPENAI_API_KEY",
			env:     map[string]string{"OPENAI_API_KEY": "sk-oai"},
			want:    map[string]string{"openai/gpt-5.4": "", "anthropic/claude-opus-4-7": anthropicReason},
			wantKey: map[string]string{"openai/gpt-5.4": "sk-oai"},
		},
		{
			name: "loopback servers need no key",
			own: `{"providers": {
				"ollama": {"baseUrl": "http://localhost:11434/v1", "api": "openai-completions", "models": [{"id": "a"}]},
				"llamacpp": {"baseUrl": "http://127.0.0.2:8080/v1", "api": "openai-completions", "models": [{"id": "b"}]},
				"v6": {"baseUrl": "http://[::1]:8000/v1", "api": "openai-completions", "models": [{"id": "c"}]},
				"lan": {"baseUrl": "http://192.168.1.5:8000/v1", "api": "openai-completions", "models": [{"id": "d"}]},
				"envlocal": {"baseUrl": "http://localhost:1/v1", "api": "openai-completions", "apiKey": "OLLAMA_API_KEY", "models": [{"id": "e"}]}}}`,
			want: map[string]string{
				"ollama/a": "", "llamacpp/b": "", "v6/c": "", "envlocal/e": "",
				"lan/d": `no API key: add apiKey to models.json provider "lan"`,
			},
			wantKey: map[string]string{"ollama/a": ""},
		},
		{
			name: "well-known provider variable is used only when configured",
			own:  `{"providers": {"openrouter": {"baseUrl": "https://openrouter.ai/api/v1", "api": "openai-completions", "models": [{"id": "anthropic/claude-sonnet-4.6"}]}}}`,
			env:  map[string]string{"OPENROUTER_API_KEY": "sk-or"},
			want: map[string]string{"openrouter/anthropic/claude-sonnet-4.6": ""},
			wantKey: map[string]string{
				"openrouter/anthropic/claude-sonnet-4.6": "sk-or",
			},
		},
		{
			name: "well-known provider without its variable",
			own:  `{"providers": {"groq": {"baseUrl": "https://api.groq.com/openai/v1", "api": "openai-completions", "models": [{"id": "llama"}]}}}`,
			want: map[string]string{"groq/llama": `no API key: set GROQ_API_KEY or add apiKey to models.json provider "groq"`},
		},
		{
			name: "failing header command",
			own: `{"providers": {"acme": {"baseUrl": "https://acme.example", "api": "anthropic-messages", "apiKey": "k",
				"models": [{"id": "a", "headers": {"X-Secret": "!exit 1"}}, {"id": "b"}]}}}`,
			want: map[string]string{"acme/b": ""},
		},
		{
			name:  "extra models are always available",
			extra: []llm.Model{{ID: "echo", Provider: "faux", API: llm.APIFaux}},
			want:  map[string]string{"faux/echo": "", "anthropic/claude-opus-4-7": anthropicReason},
			wantKey: map[string]string{
				"faux/echo": "",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, _ := writeConfig(t, tt.own)
			r, err := Load(context.Background(), Options{ConfigDir: dir, Env: envOf(tt.env), Extra: tt.extra})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			for k, reason := range tt.want {
				p, id, _ := strings.Cut(k, "/")
				e := mustFind(t, r, p, id)
				if e.Available != (reason == "") || e.Reason != reason {
					t.Errorf("%s: available %v reason %q, want reason %q", k, e.Available, e.Reason, reason)
				}
			}
			for k, want := range tt.wantKey {
				p, id, _ := strings.Cut(k, "/")
				key, _, err := r.Auth(context.Background(), mustFind(t, r, p, id).Model)
				if err != nil || key != want {
					t.Errorf("%s: Auth = %q %v, want %q", k, key, err, want)
				}
			}
			// Available lists exactly the available entries.
			n := 0
			for _, e := range r.All() {
				if e.Available {
					n++
				}
			}
			if got := len(r.Available()); got != n {
				t.Errorf("Available() has %d models, All() marks %d", got, n)
			}
		})
	}
}

func TestHeaderCommandFailureReason(t *testing.T) {
	dir, _ := writeConfig(t, `{"providers": {"acme": {"baseUrl": "https://acme.example", "api": "anthropic-messages", "apiKey": "k",
		"models": [{"id": "a", "headers": {"X-Secret": "!echo denied >&2; exit 1"}}]}}}`)
	r, err := Load(context.Background(), Options{ConfigDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	e := mustFind(t, r, "acme", "a")
	for _, w := range []string{`header "X-Secret" command failed`, "exit status 1", "denied"} {
		if e.Available || !strings.Contains(e.Reason, w) {
			t.Errorf("available %v reason %q, want it to contain %q", e.Available, e.Reason, w)
		}
	}
}

func TestLoadCancelled(t *testing.T) {
	dir, _ := writeConfig(t, `{"providers": {"acme": {"baseUrl": "https://acme.example", "api": "anthropic-messages", "apiKey": "!sleep 5", "models": [{"id": "a"}]}}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	r, err := Load(ctx, Options{ConfigDir: dir})
	if r != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Load = %v, %v; want nil and the context's error", r, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Load took %s after cancellation", d)
	}
}

func TestResolve(t *testing.T) {
	dir, _ := writeConfig(t, `{"providers": {
		"ollama": {"baseUrl": "http://localhost:11434/v1", "api": "openai-completions", "models": [{"id": "llama3.1:8b", "reasoning": true}, {"id": "qwen3"}]},
		"lmstudio": {"baseUrl": "http://localhost:1234/v1", "api": "openai-completions", "models": [{"id": "qwen3"}]},
		"openrouter": {"baseUrl": "https://openrouter.ai/api/v1", "api": "openai-completions", "apiKey": "sk-or", "models": [{"id": "anthropic/claude-sonnet-4.6"}]}}}`)
	r, err := Load(context.Background(), Options{
		ConfigDir: dir,
		Env:       envOf(map[string]string{"ANTHROPIC_API_KEY": "sk-ant"}),
		Extra:     []llm.Model{{ID: "echo", Provider: "faux", API: llm.APIFaux}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		spec      string
		wantModel string // provider/id
		wantLevel llm.ThinkingLevel
		wantErr   error
		wantMsg   []string
	}{
		{spec: "anthropic/claude-opus-4-7", wantModel: "anthropic/claude-opus-4-7"},
		{spec: "claude-sonnet-4-6", wantModel: "anthropic/claude-sonnet-4-6"},
		{spec: "  claude-sonnet-4-6  ", wantModel: "anthropic/claude-sonnet-4-6"},
		{spec: "claude-opus-4-7:high", wantModel: "anthropic/claude-opus-4-7", wantLevel: llm.ThinkingHigh},
		{spec: "anthropic/claude-opus-4-7:xhigh", wantModel: "anthropic/claude-opus-4-7", wantLevel: llm.ThinkingXHigh},
		{spec: "claude-haiku-4-5:off", wantModel: "anthropic/claude-haiku-4-5", wantLevel: llm.ThinkingOff},
		{spec: "Claude-Opus-4-7", wantModel: "anthropic/claude-opus-4-7"},
		{spec: "ANTHROPIC/claude-opus-4-7", wantModel: "anthropic/claude-opus-4-7"},
		{spec: "ollama/llama3.1:8b", wantModel: "ollama/llama3.1:8b"},
		{spec: "llama3.1:8b", wantModel: "ollama/llama3.1:8b"},
		{spec: "llama3.1:8b:low", wantModel: "ollama/llama3.1:8b", wantLevel: llm.ThinkingLow},
		{spec: "openrouter/anthropic/claude-sonnet-4.6:medium", wantModel: "openrouter/anthropic/claude-sonnet-4.6", wantLevel: llm.ThinkingMedium},
		{spec: "anthropic/claude-sonnet-4.6", wantModel: "openrouter/anthropic/claude-sonnet-4.6"},
		{spec: "ollama/qwen3", wantModel: "ollama/qwen3"},
		{spec: "faux/echo", wantModel: "faux/echo"},
		{spec: "echo:minimal", wantModel: "faux/echo", wantLevel: llm.ThinkingMinimal},
		{spec: "qwen3", wantErr: ErrAmbiguousModel, wantMsg: []string{`"qwen3"`, "lmstudio/qwen3, ollama/qwen3"}},
		{spec: "gpt-5.4", wantErr: ErrUnavailable, wantMsg: []string{"openai/gpt-5.4 is not available", "set OPENAI_API_KEY"}},
		{spec: "openai/gpt-5.4:high", wantErr: ErrUnavailable},
		{spec: "claude-opus-4-8", wantErr: ErrUnknownModel, wantMsg: []string{`unknown model "claude-opus-4-8"`, "did you mean anthropic/claude-opus-4-7"}},
		{spec: "anthropic/claude-opus", wantErr: ErrUnknownModel, wantMsg: []string{"anthropic/claude-opus-4-7"}},
		{spec: "mistral/large", wantErr: ErrUnknownModel},
		{spec: "completely-different", wantErr: ErrUnknownModel, wantMsg: []string{"list the models"}},
		{spec: "claude-opus-4-7:turbo", wantMsg: []string{`"claude-opus-4-7:turbo"`, `invalid thinking level "turbo"`}},
		{spec: "", wantErr: ErrUnknownModel},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			m, level, err := r.Resolve(tt.spec)
			if tt.wantModel != "" {
				if err != nil {
					t.Fatalf("Resolve: %v", err)
				}
				if got := m.Provider + "/" + m.ID; got != tt.wantModel || level != tt.wantLevel {
					t.Errorf("Resolve = %s %q, want %s %q", got, level, tt.wantModel, tt.wantLevel)
				}
				return
			}
			if err == nil {
				t.Fatalf("Resolve = %s/%s, want an error", m.Provider, m.ID)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %q does not wrap %v", err, tt.wantErr)
			}
			for _, w := range tt.wantMsg {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestAuthUnknownProvider(t *testing.T) {
	r, err := Load(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = r.Auth(context.Background(), &llm.Model{Provider: "nowhere", ID: "x"})
	if !errors.Is(err, ErrUnknownModel) {
		t.Errorf("Auth error = %v, want ErrUnknownModel", err)
	}
}

func TestSamePathReadOnce(t *testing.T) {
	dir, path := writeConfig(t, `{"providers": {"bad": {"api": "nope"}}}`)
	r, err := Load(context.Background(), Options{ConfigDir: dir, PiModelsPath: path})
	if r == nil || err == nil {
		t.Fatalf("Load = %v, %v", r, err)
	}
	if n := len(r.Problems()); n != 1 {
		t.Errorf("%d problems, want 1: the same file must not be read twice", n)
	}
}

func TestHeaderValues(t *testing.T) {
	counter := filepath.Join(t.TempDir(), "runs")
	fresh := "!!echo run >> '" + counter + "'; echo tok-$(wc -l < '" + counter + "' | tr -d ' ')"
	dir, _ := writeConfig(t, `{"providers": {"acme": {"baseUrl": "https://acme.example", "api": "anthropic-messages", "apiKey": "k",
		"headers": {"X-Fresh": `+jsonString(fresh)+`, "X-Env": "PORTKEY_KEY", "X-Literal": "AGENTD"},
		"models": [{"id": "a"}, {"id": "b"}, {"id": "c", "headers": {"X-Literal": "mine"}}]}}}`)
	r, err := Load(context.Background(), Options{ConfigDir: dir, Env: envOf(map[string]string{"PORTKEY_KEY": "pk-1"})})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(counter)
	if n := strings.Count(string(data), "run"); n != 1 {
		t.Errorf("a header command shared by three models ran %d times during Load, want 1", n)
	}
	tests := []struct {
		id   string
		want map[string]string
	}{
		// Header values that look like unset variable names stay literal, as in pi.
		{"a", map[string]string{"X-Fresh": "tok-2", "X-Env": "pk-1", "X-Literal": "AGENTD"}},
		{"c", map[string]string{"X-Fresh": "tok-3", "X-Env": "pk-1", "X-Literal": "mine"}},
	}
	for _, tt := range tests {
		_, headers, err := r.Auth(context.Background(), mustFind(t, r, "acme", tt.id).Model)
		if err != nil || !reflect.DeepEqual(headers, tt.want) {
			t.Errorf("%s: headers %v %v, want %v", tt.id, headers, err, tt.want)
		}
	}
}

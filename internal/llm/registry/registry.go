// Package registry knows which models agentd can talk to and how to
// authenticate to them. It merges a built-in catalog of Anthropic and
// OpenAI models with the providers and models of pi-compatible models.json
// files, works out for every model whether credentials are at hand, and
// resolves "provider/id[:thinking]" specs as pi does.
//
// # Files
//
// Load reads <ConfigDir>/models.json and, when given, pi's own models.json
// (Options.PiModelsPath, usually ~/.pi/agent/models.json). Both use pi's
// format:
//
//	{"providers": {"ollama": {
//	    "baseUrl": "http://localhost:11434/v1",
//	    "api": "openai-completions",
//	    "models": [{"id": "llama3.1:8b"}]}}}
//
// When both files configure a provider, agentd's file wins setting by
// setting, and models are merged by id with agentd's definition winning.
// Missing model fields take pi's defaults: name = id, input ["text"], zero
// cost, contextWindow 128000, maxTokens 16384, reasoning false. An entry
// naming a built-in provider ("anthropic", "openai") without models
// overrides its baseUrl, headers and apiKey; with models it adds to (or, by
// id, replaces) the built-in ones; a replacement starts from pi's defaults,
// not from the built-in model, so modelOverrides is the way to adjust
// single built-in models, as in pi.
//
// A broken file does not take the registry down: malformed JSON drops that
// file, a bad provider entry drops that provider, a bad model drops that
// model. Every such problem is returned by Load as a *ConfigError naming
// the file, provider, model and field, and stays readable from
// Registry.Problems; nothing is dropped silently. pi instead ignores the
// whole file on any error; agentd keeps what it can.
//
// Unlike pi, a provider that defines models does not need an apiKey: its
// models are then unavailable (with a reason) unless the provider's baseUrl
// is a loopback address, where local servers such as Ollama or llama.cpp
// need no key.
//
// # Credentials
//
// apiKey and header values take pi's forms: a literal; the name of an
// environment variable, replaced by its value when set; "!command", run
// once through sh -c and its trimmed output reused for the Registry's
// lifetime; or "!!command", run again for every request (for tokens that
// rotate). An apiKey that looks like an environment variable name
// (UPPER_CASE) but names an unset variable makes the provider unavailable
// rather than being sent literally, as pi would. A command that fails,
// times out (Options.CommandTimeout, default 10s) or prints nothing makes
// the model unavailable with the command's error as the reason.
//
// Keys for the built-in providers come from the environment:
// ANTHROPIC_OAUTH_TOKEN or ANTHROPIC_API_KEY (the token first, as pi
// does), and OPENAI_API_KEY. A models.json apiKey for the provider takes
// precedence. Providers pi knows by name (openrouter, groq, xai, ...) use
// their well-known variable (OPENROUTER_API_KEY, ...) when configured in a
// models.json without an apiKey.
//
// The environment is never read directly: Options.Env is consulted
// instead. Commands run with agentd's own process environment.
package registry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
)

// Sources of an Entry other than a models.json path.
const (
	SourceBuiltin = "built-in"
	SourceExtra   = "extra"
)

// Errors that Resolve, Find and Auth wrap, for errors.Is.
var (
	// ErrUnknownModel: no model matches the spec.
	ErrUnknownModel = errors.New("unknown model")
	// ErrAmbiguousModel: a bare id matches models of several providers.
	ErrAmbiguousModel = errors.New("ambiguous model")
	// ErrUnavailable: the model exists but has no usable credentials.
	ErrUnavailable = errors.New("model unavailable")
)

// Options configure Load.
type Options struct {
	// ConfigDir is agentd's configuration directory; <ConfigDir>/models.json
	// is read when it exists. Empty skips it.
	ConfigDir string
	// PiModelsPath is a pi models.json to read as well (e.g.
	// ~/.pi/agent/models.json). Empty skips it. agentd's own file wins
	// where both configure the same thing.
	PiModelsPath string
	// Env looks up environment variables; nil means an empty environment.
	Env func(string) string
	// CommandTimeout bounds each apiKey/header command; 0 means
	// DefaultCommandTimeout.
	CommandTimeout time.Duration
	// Extra are models the caller serves itself (such as the faux model).
	// They need no credentials and are always available; one with the
	// same provider and id as a configured model replaces it.
	Extra []llm.Model
}

// Entry is one model as the registry lists it.
type Entry struct {
	// Model is shared with the registry: treat it as read-only.
	Model *llm.Model
	// Available reports whether credentials for the model are at hand.
	Available bool
	// Reason says why the model is unavailable, in words for the user.
	Reason string
	// Source is SourceBuiltin, SourceExtra or the path of the models.json
	// that defined the model.
	Source string
}

// Registry is the loaded set of models. It is safe for concurrent use; the
// only state that changes after Load is the cache of "!command" output.
type Registry struct {
	entries      []Entry
	providers    map[string]*providerAuth
	modelHeaders map[modelKey]map[string]string
	extra        map[modelKey]bool
	problems     []error
	res          *resolver
}

type modelKey struct{ provider, id string }

// providerAuth is how to authenticate to one provider.
type providerAuth struct {
	name       string
	apiKey     string // configured value (literal, env name, !command), empty if none
	apiKeyFile string
	keyEnv     []string // environment variables to try when apiKey is empty
	keyHint    string   // the variable to suggest in "no API key" reasons
	local      bool     // loopback baseUrl: no key needed
	headers    map[string]string
	authHeader bool
}

// Load builds the registry: the built-in catalog, the providers of the
// configured models.json files, and opts.Extra, each with its
// availability. Checking availability runs apiKey commands, so Load may
// take up to the command timeout per distinct command.
//
// Problems with the configuration do not stop Load: it returns a usable
// Registry together with an error joining one *ConfigError per problem.
// Only a cancelled ctx makes it return a nil Registry.
func Load(ctx context.Context, opts Options) (*Registry, error) {
	env := opts.Env
	if env == nil {
		env = func(string) string { return "" }
	}
	timeout := opts.CommandTimeout
	if timeout <= 0 {
		timeout = DefaultCommandTimeout
	}
	r := &Registry{
		providers:    make(map[string]*providerAuth),
		modelHeaders: make(map[modelKey]map[string]string),
		extra:        make(map[modelKey]bool),
		res:          &resolver{env: env, timeout: timeout},
	}

	var defs map[string]*providerDef
	piPath := opts.PiModelsPath
	if piPath != "" {
		d, errs := readModelsFile(piPath)
		defs = d
		r.problems = append(r.problems, errs...)
	}
	if opts.ConfigDir != "" {
		own := filepath.Join(opts.ConfigDir, "models.json")
		if piPath == "" || filepath.Clean(piPath) != filepath.Clean(own) {
			d, errs := readModelsFile(own)
			defs = mergeProviders(defs, d)
			r.problems = append(r.problems, errs...)
		}
	}

	r.build(defs)
	if err := r.checkAvailability(ctx); err != nil {
		return nil, err
	}
	r.addExtra(opts.Extra)
	return r, errors.Join(r.problems...)
}

// build turns the merged configuration into entries and the auth table.
func (r *Registry) build(defs map[string]*providerDef) {
	add := func(m llm.Model, source string) {
		mm := m
		r.entries = append(r.entries, Entry{Model: &mm, Source: source})
	}
	catalog := Catalog()

	for _, bp := range builtinProviders() {
		def := defs[bp.name]
		pa := &providerAuth{name: bp.name, keyEnv: bp.keyEnv, keyHint: bp.keyHint}
		baseURL := bp.baseURL
		var custom []modelDef
		if def != nil {
			if def.baseURL != "" {
				baseURL = def.baseURL
			}
			pa.apiKey, pa.apiKeyFile = def.apiKey, def.apiKeyFile
			pa.headers = def.headers
			pa.authHeader = def.authHeader != nil && *def.authHeader
			custom = def.models
		}
		pa.local = isLoopback(baseURL)
		r.providers[bp.name] = pa

		used := map[string]bool{}
		for _, m := range catalog {
			if m.Provider != bp.name {
				continue
			}
			m.BaseURL = baseURL
			source := SourceBuiltin
			if def != nil {
				if o, ok := def.overrides[m.ID]; ok {
					used[m.ID] = true
					applyOverride(&m, o)
					r.setModelHeaders(pa, m, o.headers)
				}
				if i := indexModel(custom, m.ID); i >= 0 {
					// A models.json definition with a built-in id replaces
					// the built-in model, as in pi.
					d := custom[i]
					delete(r.modelHeaders, modelKey{bp.name, m.ID})
					m = customModel(bp.name, baseURL, apiOr(d.api, def.api, bp.api), def.compat, d)
					r.setModelHeaders(pa, m, d.headers)
					source = d.file
				}
			}
			add(m, source)
		}
		if def == nil {
			continue
		}
		for _, d := range custom {
			if indexCatalog(catalog, bp.name, d.id) >= 0 {
				continue
			}
			m := customModel(bp.name, baseURL, apiOr(d.api, def.api, bp.api), def.compat, d)
			r.setModelHeaders(pa, m, d.headers)
			add(m, d.file)
		}
		for _, id := range sortedKeys(def.overrides) {
			if !used[id] {
				r.problems = append(r.problems, &ConfigError{File: def.overrides[id].file, Provider: bp.name, Model: id, Field: "modelOverrides",
					Msg: fmt.Sprintf("no built-in %s model has this id; the override is ignored", bp.name)})
			}
		}
	}

	names := make([]string, 0, len(defs))
	for name := range defs {
		if _, ok := findBuiltinProvider(name); !ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		def := defs[name]
		if len(def.models) == 0 && def.declared {
			continue // its models were rejected and reported one by one
		}
		if len(def.models) == 0 {
			r.problems = append(r.problems, &ConfigError{File: def.file, Provider: name,
				Msg: fmt.Sprintf("is not a built-in provider (%s, %s) and defines no models, so it adds nothing; check the name or add \"models\"", ProviderAnthropic, ProviderOpenAI)})
			continue
		}
		if def.baseURL == "" {
			r.problems = append(r.problems, &ConfigError{File: def.file, Provider: name, Field: "baseUrl",
				Msg: "missing; a provider that is not built in needs the URL of its API"})
			continue
		}
		pa := &providerAuth{name: name, apiKey: def.apiKey, apiKeyFile: def.apiKeyFile, headers: def.headers,
			authHeader: def.authHeader != nil && *def.authHeader, local: isLoopback(def.baseURL)}
		if v := wellKnownKeyEnv(name); v != "" {
			pa.keyEnv, pa.keyHint = []string{v}, v
		}
		r.providers[name] = pa
		for _, d := range def.models {
			api := apiOr(d.api, def.api, "")
			if api == "" {
				r.problems = append(r.problems, &ConfigError{File: d.file, Provider: name, Model: d.id, Field: "api",
					Msg: "missing; set \"api\" on the provider or the model (" + supportedAPIList + ")"})
				continue
			}
			m := customModel(name, def.baseURL, api, def.compat, d)
			r.setModelHeaders(pa, m, d.headers)
			add(m, d.file)
		}
		for _, id := range sortedKeys(def.overrides) {
			r.problems = append(r.problems, &ConfigError{File: def.overrides[id].file, Provider: name, Model: id, Field: "modelOverrides",
				Msg: "only adjusts built-in models; put these fields in the model's own entry under \"models\""})
		}
	}
}

func (r *Registry) setModelHeaders(pa *providerAuth, m llm.Model, own map[string]string) {
	if len(own) > 0 {
		r.modelHeaders[modelKey{m.Provider, m.ID}] = mergeHeaders(pa.headers, own)
	}
}

func (r *Registry) headerSpecs(pa *providerAuth, k modelKey) map[string]string {
	if h, ok := r.modelHeaders[k]; ok {
		return h
	}
	return pa.headers
}

// customModel builds a model from a models.json definition, filling in
// pi's defaults for the fields it leaves out.
func customModel(provider, baseURL string, api llm.API, providerCompat *llm.Compat, d modelDef) llm.Model {
	m := llm.Model{
		ID: d.id, Name: d.id, API: api, Provider: provider, BaseURL: baseURL,
		Input: []string{"text"}, ContextWindow: DefaultContextWindow, MaxTokens: DefaultMaxTokens,
	}
	if providerCompat != nil {
		c := *providerCompat
		m.Compat = &c
	}
	applyOverride(&m, d)
	return m
}

func apiOr(apis ...llm.API) llm.API {
	for _, a := range apis {
		if a != "" {
			return a
		}
	}
	return ""
}

func indexModel(ms []modelDef, id string) int {
	for i := range ms {
		if ms[i].id == id {
			return i
		}
	}
	return -1
}

func indexCatalog(ms []llm.Model, provider, id string) int {
	for i := range ms {
		if ms[i].Provider == provider && ms[i].ID == id {
			return i
		}
	}
	return -1
}

func sortedKeys(m map[string]modelDef) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// isLoopback reports whether baseURL points at this machine, where local
// model servers listen and need no key.
func isLoopback(baseURL string) bool {
	u, err := url.Parse(baseURL)
	if err != nil {
		return false
	}
	host := strings.ToLower(u.Hostname())
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkAvailability resolves every provider's key and runs every header
// command once, recording the outcome on the entries. Results are shared
// within this pass so that a "!!command" used by many models runs once.
func (r *Registry) checkAvailability(ctx context.Context) error {
	keyErrs := map[string]error{}    // by provider
	headerErrs := map[string]error{} // by command spec
	cancelled := func() error { return fmt.Errorf("loading the model registry: %w", ctx.Err()) }
	for i := range r.entries {
		e := &r.entries[i]
		pa := r.providers[e.Model.Provider]
		err, ok := keyErrs[pa.name]
		if !ok {
			_, err = r.providerKey(ctx, pa)
			if ctx.Err() != nil {
				return cancelled()
			}
			keyErrs[pa.name] = err
		}
		if err != nil {
			e.Reason = err.Error()
			continue
		}
		specs := r.headerSpecs(pa, modelKey{e.Model.Provider, e.Model.ID})
		for _, name := range sortedHeaderNames(specs) {
			spec := specs[name]
			if !strings.HasPrefix(spec, "!") {
				continue // literals and variables cannot fail
			}
			herr, ok := headerErrs[spec]
			if !ok {
				_, herr = r.res.resolveValue(ctx, spec, false)
				if ctx.Err() != nil {
					return cancelled()
				}
				headerErrs[spec] = herr
			}
			if herr != nil {
				e.Reason = headerFailure(name, herr).Error()
				break
			}
		}
		e.Available = e.Reason == ""
	}
	return nil
}

func headerFailure(name string, err error) error {
	return &unavailableError{reason: fmt.Sprintf("header %q command failed: %s", name, err.Error()), err: err}
}

// unavailableError is why a model cannot be used; its text is the Reason.
type unavailableError struct {
	reason string
	err    error
}

func (e *unavailableError) Error() string { return e.reason }
func (e *unavailableError) Unwrap() []error {
	if e.err == nil {
		return []error{ErrUnavailable}
	}
	return []error{ErrUnavailable, e.err}
}

// providerKey resolves the API key of a provider: the models.json apiKey,
// else the provider's environment variables, else nothing for a local
// server.
func (r *Registry) providerKey(ctx context.Context, pa *providerAuth) (string, error) {
	if pa.apiKey != "" {
		v, err := r.res.resolveValue(ctx, pa.apiKey, true)
		switch {
		case err == nil:
			return v, nil
		case ctx.Err() != nil:
			return "", ctx.Err()
		case errors.Is(err, errEnvUnset):
			if pa.local {
				return "", nil
			}
			return "", &unavailableError{reason: fmt.Sprintf("no API key: apiKey of provider %q in %s names the environment variable %s, which is not set", pa.name, pa.apiKeyFile, pa.apiKey)}
		default:
			return "", &unavailableError{reason: "apiKey command failed: " + err.Error(), err: err}
		}
	}
	for _, name := range pa.keyEnv {
		if v := r.res.env(name); v != "" {
			return v, nil
		}
	}
	if pa.local {
		return "", nil
	}
	if pa.keyHint != "" {
		return "", &unavailableError{reason: fmt.Sprintf("no API key: set %s or add apiKey to models.json provider %q", pa.keyHint, pa.name)}
	}
	return "", &unavailableError{reason: fmt.Sprintf("no API key: add apiKey to models.json provider %q", pa.name)}
}

// resolveHeaders resolves the configured headers of a model for a request.
func (r *Registry) resolveHeaders(ctx context.Context, pa *providerAuth, k modelKey) (map[string]string, error) {
	specs := r.headerSpecs(pa, k)
	if len(specs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(specs))
	for _, name := range sortedHeaderNames(specs) {
		v, err := r.res.resolveValue(ctx, specs[name], false)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, headerFailure(name, err)
		}
		out[name] = v
	}
	return out, nil
}

func sortedHeaderNames(h map[string]string) []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (r *Registry) addExtra(extra []llm.Model) {
	for _, m := range extra {
		if m.Provider == "" || m.ID == "" {
			r.problems = append(r.problems, &ConfigError{File: "Options.Extra", Model: m.ID, Provider: m.Provider,
				Msg: "an extra model needs both a provider and an id"})
			continue
		}
		mm := m
		e := Entry{Model: &mm, Available: true, Source: SourceExtra}
		k := modelKey{m.Provider, m.ID}
		r.extra[k] = true
		if i := r.index(m.Provider, m.ID); i >= 0 {
			r.entries[i] = e
		} else {
			r.entries = append(r.entries, e)
		}
	}
}

func (r *Registry) index(provider, id string) int {
	for i := range r.entries {
		if r.entries[i].Model.Provider == provider && r.entries[i].Model.ID == id {
			return i
		}
	}
	return -1
}

// All lists every model, available or not: the built-in providers in
// catalog order, then configured providers by name, then the extras.
func (r *Registry) All() []Entry {
	return append([]Entry(nil), r.entries...)
}

// Available lists the models that can be used now.
func (r *Registry) Available() []*llm.Model {
	var out []*llm.Model
	for _, e := range r.entries {
		if e.Available {
			out = append(out, e.Model)
		}
	}
	return out
}

// Find looks a model up by provider and exact id.
func (r *Registry) Find(provider, id string) (Entry, bool) {
	if i := r.index(provider, id); i >= 0 {
		return r.entries[i], true
	}
	return Entry{}, false
}

// KeyHint names where provider's API key is looked up: its apiKey in
// models.json when one names an environment variable, else the
// environment variable agentd reads for it; "" when none is known (a
// local server needs none).
func (r *Registry) KeyHint(provider string) string {
	pa := r.providers[provider]
	if pa == nil {
		return wellKnownKeyEnv(provider)
	}
	if pa.apiKey != "" && looksLikeEnvName(pa.apiKey) {
		return pa.apiKey
	}
	if pa.apiKey != "" || pa.apiKeyFile != "" {
		return "the apiKey of provider " + strconv.Quote(provider) + " in models.json"
	}
	return pa.keyHint
}

// Problems returns the configuration problems Load found, each a
// *ConfigError.
func (r *Registry) Problems() []error {
	return append([]error(nil), r.problems...)
}

// Auth resolves the credentials for a request to m: the API key (empty for
// local servers and extra models) and the configured headers, which the
// caller passes as llm.StreamOptions.APIKey and .Headers. Keys are
// resolved now rather than at Load because "!!command" keys rotate;
// "!command" output is cached for the Registry's lifetime. With
// authHeader set on the provider, headers include "Authorization: Bearer
// <key>".
func (r *Registry) Auth(ctx context.Context, m *llm.Model) (string, map[string]string, error) {
	if m == nil {
		return "", nil, errors.New("no model given")
	}
	k := modelKey{m.Provider, m.ID}
	if r.extra[k] {
		return "", nil, nil
	}
	pa := r.providers[m.Provider]
	if pa == nil {
		return "", nil, fmt.Errorf("%s/%s: provider %q is not configured: %w", m.Provider, m.ID, m.Provider, ErrUnknownModel)
	}
	key, err := r.providerKey(ctx, pa)
	if err != nil {
		return "", nil, fmt.Errorf("%s/%s: %w", m.Provider, m.ID, err)
	}
	headers, err := r.resolveHeaders(ctx, pa, k)
	if err != nil {
		return "", nil, fmt.Errorf("%s/%s: %w", m.Provider, m.ID, err)
	}
	if pa.authHeader && key != "" {
		if headers == nil {
			headers = make(map[string]string, 1)
		}
		headers["Authorization"] = "Bearer " + key
	}
	return key, headers, nil
}

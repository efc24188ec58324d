package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"os"
	"sort"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
)

// Defaults for fields a models.json model leaves out, as pi documents them.
const (
	DefaultContextWindow = 128000
	DefaultMaxTokens     = 16384
)

// ConfigError is one problem found in a models.json file. Load keeps going
// after one: the file, provider or model it names is left out and
// everything else is used.
type ConfigError struct {
	File     string // path of the models.json
	Provider string // provider key, empty for problems with the whole file
	Model    string // model id (or "models[i]" when it has none), empty for provider-level problems
	Field    string // JSON field at fault, empty when it is not one field
	Msg      string
	Err      error // underlying cause, if any
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Provider != "" {
		fmt.Fprintf(&b, ": provider %q", e.Provider)
	}
	if e.Model != "" {
		fmt.Fprintf(&b, ": model %q", e.Model)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": %s", e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

func (e *ConfigError) Unwrap() error { return e.Err }

// The JSON shapes of pi's models.json. Pointers tell "absent" from zero.
// Unknown fields are ignored, as pi ignores them, so pi-only options
// (openRouterRouting, thinkingFormat, ...) do not break the file.
type fileProviderJSON struct {
	BaseURL        *string                    `json:"baseUrl"`
	API            *string                    `json:"api"`
	APIKey         *string                    `json:"apiKey"`
	Headers        map[string]string          `json:"headers"`
	AuthHeader     *bool                      `json:"authHeader"`
	Compat         json.RawMessage            `json:"compat"`
	Models         []json.RawMessage          `json:"models"`
	ModelOverrides map[string]json.RawMessage `json:"modelOverrides"`
}

type fileModelJSON struct {
	ID            *string           `json:"id"`
	Name          *string           `json:"name"`
	API           *string           `json:"api"`
	Reasoning     *bool             `json:"reasoning"`
	Input         []string          `json:"input"`
	Cost          *fileCostJSON     `json:"cost"`
	ContextWindow *float64          `json:"contextWindow"`
	MaxTokens     *float64          `json:"maxTokens"`
	Headers       map[string]string `json:"headers"`
	Compat        json.RawMessage   `json:"compat"`
}

type fileCostJSON struct {
	Input      *float64 `json:"input"`
	Output     *float64 `json:"output"`
	CacheRead  *float64 `json:"cacheRead"`
	CacheWrite *float64 `json:"cacheWrite"`
}

// compatJSON accepts llm.Compat's fields plus pi's newer spelling of the
// adaptive-thinking switch.
type compatJSON struct {
	llm.Compat
	ForceAdaptiveThinking *bool `json:"forceAdaptiveThinking"`
}

// providerDef is one validated provider entry; unset fields are empty or
// nil so that two files' entries can be merged field by field.
type providerDef struct {
	name       string
	file       string // the file the entry came from (the later one after a merge)
	baseURL    string
	api        llm.API
	apiKey     string
	apiKeyFile string // the file apiKey came from, for messages
	headers    map[string]string
	authHeader *bool
	compat     *llm.Compat
	models     []modelDef
	overrides  map[string]modelDef
	// declared is set when the entry had a "models" array, even if every
	// model in it was rejected.
	declared bool
}

// modelDef is one validated model entry (or modelOverrides entry, which
// has no id). Unset fields stay nil.
type modelDef struct {
	file          string
	id            string
	name          *string
	api           llm.API
	reasoning     *bool
	input         []string
	cost          *fileCostJSON
	contextWindow *int64
	maxTokens     *int64
	headers       map[string]string
	compat        *llm.Compat
}

// supportedAPIs are the wire APIs agentd has providers for.
func supportedAPI(a string) bool {
	switch llm.API(a) {
	case llm.APIAnthropicMessages, llm.APIOpenAICompletions, llm.APIOpenAIResponses:
		return true
	}
	return false
}

const supportedAPIList = "anthropic-messages, openai-completions, openai-responses"

// readModelsFile reads and validates one models.json. A missing file is
// not an error. It returns the providers it could accept and a problem for
// everything it could not.
func readModelsFile(path string) (map[string]*providerDef, []error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{&ConfigError{File: path, Msg: "cannot read the file: " + err.Error(), Err: err}}
	}
	return parseModelsJSON(path, data)
}

func parseModelsJSON(path string, data []byte) (map[string]*providerDef, []error) {
	var top struct {
		Providers map[string]json.RawMessage `json:"providers"`
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, []error{&ConfigError{File: path, Msg: "the file is empty; it should hold {\"providers\": {...}}"}}
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, []error{fileJSONError(path, data, err)}
	}
	if top.Providers == nil {
		return nil, []error{&ConfigError{File: path, Field: "providers", Msg: "missing; the file should hold {\"providers\": {...}}"}}
	}

	var problems []error
	out := make(map[string]*providerDef, len(top.Providers))
	names := make([]string, 0, len(top.Providers))
	for name := range top.Providers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p, errs := parseProvider(path, name, top.Providers[name])
		problems = append(problems, errs...)
		if p != nil {
			out[name] = p
		}
	}
	return out, problems
}

// fileJSONError turns a decoding error of the whole file into a message
// with a line and column, which is what a person editing it needs.
func fileJSONError(path string, data []byte, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		// Offset counts the bytes read including the offending one.
		line, col := lineCol(data, se.Offset-1)
		return &ConfigError{File: path, Msg: fmt.Sprintf("malformed JSON at line %d, column %d: %s", line, col, se.Error()), Err: err}
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "(top level)"
		}
		return &ConfigError{File: path, Field: field, Msg: fmt.Sprintf("expected %s, found JSON %s", jsonKind(te.Type.Kind().String()), te.Value), Err: err}
	}
	return &ConfigError{File: path, Msg: "malformed JSON: " + err.Error(), Err: err}
}

func lineCol(data []byte, offset int64) (int, int) {
	offset = max(0, min(offset, int64(len(data))))
	line, col := 1, 1
	for _, c := range data[:offset] {
		if c == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}

func jsonKind(goKind string) string {
	switch goKind {
	case "map", "struct":
		return "an object"
	case "slice", "array":
		return "an array"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "float64", "int64", "int":
		return "a number"
	case "ptr":
		return "a value of another type"
	}
	return goKind
}

// decodeField decodes raw into v and describes a type mismatch by the
// field it happened in.
func decodeField(raw []byte, v any) (field, msg string, err error) {
	err = json.Unmarshal(raw, v)
	if err == nil {
		return "", "", nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field, fmt.Sprintf("expected %s, found JSON %s", jsonKind(te.Type.Kind().String()), te.Value), err
	}
	return "", "malformed: " + err.Error(), err
}

func parseProvider(path, name string, raw json.RawMessage) (*providerDef, []error) {
	perr := func(field, msg string, err error) []error {
		return []error{&ConfigError{File: path, Provider: name, Field: field, Msg: msg, Err: err}}
	}
	if strings.TrimSpace(name) == "" || strings.ContainsAny(name, "/:") {
		return nil, perr("", `provider names must be non-empty and must not contain "/" or ":", which separate provider, model and thinking level`, nil)
	}
	var j fileProviderJSON
	if field, msg, err := decodeField(raw, &j); err != nil {
		return nil, perr(field, msg, err)
	}

	p := &providerDef{name: name, file: path, headers: j.Headers, authHeader: j.AuthHeader}
	if j.BaseURL != nil {
		if msg := checkBaseURL(*j.BaseURL); msg != "" {
			return nil, perr("baseUrl", msg, nil)
		}
		p.baseURL = strings.TrimRight(*j.BaseURL, "/")
	}
	if j.API != nil {
		if !supportedAPI(*j.API) {
			return nil, perr("api", fmt.Sprintf("unsupported api %q; agentd speaks %s", *j.API, supportedAPIList), nil)
		}
		p.api = llm.API(*j.API)
	}
	if j.APIKey != nil {
		if *j.APIKey == "" {
			return nil, perr("apiKey", "is empty; remove it or give a key, an environment variable name or a !command", nil)
		}
		p.apiKey = *j.APIKey
		p.apiKeyFile = path
	}
	if len(j.Compat) > 0 {
		c, field, msg, err := parseCompat(j.Compat)
		if err != nil {
			return nil, perr("compat"+field, msg, err)
		}
		p.compat = c
	}

	var problems []error
	p.declared = len(j.Models) > 0
	seen := map[string]bool{}
	for i, rawModel := range j.Models {
		m, err := parseModel(path, name, i, rawModel, true)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if seen[m.id] {
			problems = append(problems, &ConfigError{File: path, Provider: name, Model: m.id, Msg: "defined twice in this provider; the later definition is used"})
			for k := range p.models {
				if p.models[k].id == m.id {
					p.models = append(p.models[:k], p.models[k+1:]...)
					break
				}
			}
		}
		seen[m.id] = true
		p.models = append(p.models, m)
	}
	if len(j.ModelOverrides) > 0 {
		p.overrides = make(map[string]modelDef, len(j.ModelOverrides))
		ids := make([]string, 0, len(j.ModelOverrides))
		for id := range j.ModelOverrides {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			m, err := parseModel(path, name, -1, j.ModelOverrides[id], false)
			if err != nil {
				var ce *ConfigError
				if errors.As(err, &ce) {
					ce.Model = id
					ce.Field = strings.TrimSuffix("modelOverrides."+ce.Field, ".")
				}
				problems = append(problems, err)
				continue
			}
			m.id = id
			p.overrides[id] = m
		}
	}
	return p, problems
}

func checkBaseURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Sprintf("%q is not an http(s) URL", s)
	}
	return ""
}

func parseCompat(raw json.RawMessage) (*llm.Compat, string, string, error) {
	var cj compatJSON
	if field, msg, err := decodeField(raw, &cj); err != nil {
		if field != "" {
			field = "." + field
		}
		return nil, field, msg, err
	}
	switch cj.MaxTokensField {
	case "", "max_tokens", "max_completion_tokens":
	default:
		return nil, ".maxTokensField", fmt.Sprintf("%q is not one of max_tokens, max_completion_tokens", cj.MaxTokensField), errors.New("bad maxTokensField")
	}
	c := cj.Compat
	if c.AdaptiveThinking == nil {
		c.AdaptiveThinking = cj.ForceAdaptiveThinking
	}
	return &c, "", "", nil
}

// parseModel validates one entry of "models" (needID) or of
// "modelOverrides" (!needID).
func parseModel(path, provider string, index int, raw json.RawMessage, needID bool) (modelDef, error) {
	label := fmt.Sprintf("models[%d]", index)
	merr := func(model, field, msg string, err error) error {
		return &ConfigError{File: path, Provider: provider, Model: model, Field: field, Msg: msg, Err: err}
	}
	var j fileModelJSON
	if field, msg, err := decodeField(raw, &j); err != nil {
		model := label
		// Try to name the model by id even when another field is wrong.
		var idOnly struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(raw, &idOnly) == nil && idOnly.ID != "" {
			model = idOnly.ID
		}
		return modelDef{}, merr(model, field, msg, err)
	}
	m := modelDef{file: path, name: j.Name, reasoning: j.Reasoning, cost: j.Cost, headers: j.Headers}
	if needID {
		if j.ID == nil || strings.TrimSpace(*j.ID) == "" {
			return modelDef{}, merr(label, "id", "missing; every model needs the id the API knows it by", nil)
		}
		m.id = *j.ID
		label = m.id
	} else {
		label = ""
	}
	if j.Name != nil && *j.Name == "" {
		return modelDef{}, merr(label, "name", "is empty; leave it out to use the id", nil)
	}
	if j.API != nil {
		if !supportedAPI(*j.API) {
			return modelDef{}, merr(label, "api", fmt.Sprintf("unsupported api %q; agentd speaks %s", *j.API, supportedAPIList), nil)
		}
		m.api = llm.API(*j.API)
	}
	if j.Input != nil {
		for _, in := range j.Input {
			if in != "text" && in != "image" {
				return modelDef{}, merr(label, "input", fmt.Sprintf("unknown input kind %q; use \"text\" and \"image\"", in), nil)
			}
		}
		m.input = append([]string(nil), j.Input...)
	}
	var err error
	if m.contextWindow, err = positiveInt(j.ContextWindow); err != nil {
		return modelDef{}, merr(label, "contextWindow", err.Error(), nil)
	}
	if m.maxTokens, err = positiveInt(j.MaxTokens); err != nil {
		return modelDef{}, merr(label, "maxTokens", err.Error(), nil)
	}
	if c := j.Cost; c != nil {
		for _, f := range []struct {
			name string
			v    *float64
		}{{"input", c.Input}, {"output", c.Output}, {"cacheRead", c.CacheRead}, {"cacheWrite", c.CacheWrite}} {
			if f.v != nil && (*f.v < 0 || math.IsNaN(*f.v)) {
				return modelDef{}, merr(label, "cost."+f.name, "must not be negative", nil)
			}
		}
	}
	if len(j.Compat) > 0 {
		c, field, msg, err := parseCompat(j.Compat)
		if err != nil {
			return modelDef{}, merr(label, "compat"+field, msg, err)
		}
		m.compat = c
	}
	return m, nil
}

func positiveInt(v *float64) (*int64, error) {
	if v == nil {
		return nil, nil
	}
	if *v <= 0 || *v != math.Trunc(*v) || *v > math.MaxInt64/2 {
		return nil, fmt.Errorf("must be a positive whole number of tokens, not %v", *v)
	}
	n := int64(*v)
	return &n, nil
}

// mergeProviders lays over's entries on top of base's: a provider defined
// in both takes each setting from over where over sets it, and its models
// are the union by id with over's definition winning.
func mergeProviders(base, over map[string]*providerDef) map[string]*providerDef {
	out := make(map[string]*providerDef, len(base)+len(over))
	for name, p := range base {
		out[name] = p
	}
	for name, o := range over {
		b, ok := out[name]
		if !ok {
			out[name] = o
			continue
		}
		m := *b
		m.file = o.file
		if o.baseURL != "" {
			m.baseURL = o.baseURL
		}
		if o.api != "" {
			m.api = o.api
		}
		if o.apiKey != "" {
			m.apiKey, m.apiKeyFile = o.apiKey, o.apiKeyFile
		}
		if o.headers != nil {
			m.headers = mergeHeaders(b.headers, o.headers)
		}
		if o.authHeader != nil {
			m.authHeader = o.authHeader
		}
		m.compat = mergeCompat(b.compat, o.compat)
		m.models = upsertModels(b.models, o.models)
		m.declared = b.declared || o.declared
		if o.overrides != nil {
			m.overrides = make(map[string]modelDef, len(b.overrides)+len(o.overrides))
			for id, v := range b.overrides {
				m.overrides[id] = v
			}
			for id, v := range o.overrides {
				m.overrides[id] = v
			}
		}
		out[name] = &m
	}
	return out
}

// upsertModels replaces models of base by id with over's and appends the
// new ones, keeping base's order.
func upsertModels(base, over []modelDef) []modelDef {
	out := append([]modelDef(nil), base...)
	for _, o := range over {
		replaced := false
		for i := range out {
			if out[i].id == o.id {
				out[i] = o
				replaced = true
				break
			}
		}
		if !replaced {
			out = append(out, o)
		}
	}
	return out
}

func mergeHeaders(base, over map[string]string) map[string]string {
	if len(base) == 0 && len(over) == 0 {
		return nil
	}
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// mergeCompat sets every flag over sets and keeps base's others.
func mergeCompat(base, over *llm.Compat) *llm.Compat {
	if over == nil {
		return base
	}
	if base == nil {
		c := *over
		return &c
	}
	c := *base
	pick := func(dst **bool, src *bool) {
		if src != nil {
			*dst = src
		}
	}
	pick(&c.SupportsStore, over.SupportsStore)
	pick(&c.SupportsDeveloperRole, over.SupportsDeveloperRole)
	pick(&c.SupportsReasoningEffort, over.SupportsReasoningEffort)
	pick(&c.SupportsUsageInStreaming, over.SupportsUsageInStreaming)
	pick(&c.SupportsStrictMode, over.SupportsStrictMode)
	pick(&c.SupportsXHigh, over.SupportsXHigh)
	pick(&c.AdaptiveThinking, over.AdaptiveThinking)
	if over.MaxTokensField != "" {
		c.MaxTokensField = over.MaxTokensField
	}
	return &c
}

// applyOverride lays the fields an override or custom definition sets
// over m.
func applyOverride(m *llm.Model, o modelDef) {
	if o.name != nil {
		m.Name = *o.name
	}
	if o.reasoning != nil {
		m.Reasoning = *o.reasoning
	}
	if o.input != nil {
		m.Input = append([]string(nil), o.input...)
	}
	if o.contextWindow != nil {
		m.ContextWindow = *o.contextWindow
	}
	if o.maxTokens != nil {
		m.MaxTokens = *o.maxTokens
	}
	if c := o.cost; c != nil {
		set := func(dst *float64, src *float64) {
			if src != nil {
				*dst = *src
			}
		}
		set(&m.Cost.Input, c.Input)
		set(&m.Cost.Output, c.Output)
		set(&m.Cost.CacheRead, c.CacheRead)
		set(&m.Cost.CacheWrite, c.CacheWrite)
	}
	m.Compat = mergeCompat(m.Compat, o.compat)
}

package acp

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/session"
)

// A session's settings as ACP shows them: its mode (modes in the
// session/new and session/load answers, session/set_mode,
// current_mode_update), its model (models, session/set_model) and the
// same three selectors as configOptions (mode, model, thinking level;
// session/set_config_option, config_option_update). A local session
// reads and changes them on the session itself; a session of agentd
// serve through pi-server's commands (get_modes, set_mode, get_state,
// get_available_models, set_model, set_thinking_level).

// The ids of the config options.
const (
	optMode     = "mode"
	optModel    = "model"
	optThinking = "thought_level"
)

type sessionMode struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

type sessionModeState struct {
	CurrentModeID  string        `json:"currentModeId"`
	AvailableModes []sessionMode `json:"availableModes"`
}

type modelInfo struct {
	ModelID     string `json:"modelId"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

type sessionModelState struct {
	CurrentModelID  string      `json:"currentModelId"`
	AvailableModels []modelInfo `json:"availableModels"`
}

type configSelectOption struct {
	Value       string `json:"value"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

type configOption struct {
	ID           string               `json:"id"`
	Name         string               `json:"name"`
	Description  string               `json:"description,omitempty"`
	Category     string               `json:"category,omitempty"`
	Type         string               `json:"type"`
	CurrentValue string               `json:"currentValue"`
	Options      []configSelectOption `json:"options"`
}

// sessionSetup is the answer of session/new (with its sessionId) and
// session/load (without).
type sessionSetup struct {
	*newSessionResult
	Modes         *sessionModeState  `json:"modes,omitempty"`
	Models        *sessionModelState `json:"models,omitempty"`
	ConfigOptions []configOption     `json:"configOptions,omitempty"`
	// Meta reports agentd's extras (the files in the system prompt); it
	// takes the place of newSessionResult's.
	Meta *sessionMeta `json:"_meta,omitempty"`
}

type currentModeUpdate struct {
	SessionUpdate string `json:"sessionUpdate"`
	CurrentModeID string `json:"currentModeId"`
}

type configOptionUpdate struct {
	SessionUpdate string         `json:"sessionUpdate"`
	ConfigOptions []configOption `json:"configOptions"`
}

type setModeParams struct {
	SessionID string `json:"sessionId"`
	ModeID    string `json:"modeId"`
}

type setModelParams struct {
	SessionID string `json:"sessionId"`
	ModelID   string `json:"modelId"`
}

type setConfigParams struct {
	SessionID string          `json:"sessionId"`
	ConfigID  string          `json:"configId"`
	Value     json.RawMessage `json:"value"`
}

type setConfigResult struct {
	ConfigOptions []configOption `json:"configOptions"`
}

// settingsView is what the session's settings are, as last read or
// changed here.
type settingsView struct {
	mode     string
	modes    []sessionMode
	model    string
	models   []modelInfo
	thinking string
	levels   []string
}

// configurable reads and changes a conversation's settings.
type configurable interface {
	settings(ctx context.Context) (settingsView, error)
	setMode(ctx context.Context, id string) error
	setModel(ctx context.Context, id string) error
	setThinking(ctx context.Context, level string) error
}

func modelID(m *llm.Model) string { return m.Provider + "/" + m.ID }

func modelInfoOf(m *llm.Model) modelInfo {
	name := m.Name
	if name == "" {
		name = m.ID
	}
	return modelInfo{ModelID: modelID(m), Name: name, Description: m.Provider}
}

// levelsOf are the thinking levels a model takes.
func levelsOf(m *llm.Model) []string {
	out := []string{}
	for _, l := range llm.ThinkingLevels {
		if l == llm.ThinkingOff || m != nil && m.ClampThinking(l) == l {
			out = append(out, string(l))
		}
	}
	return out
}

func modeName(id string) string {
	if id == "" {
		return id
	}
	return strings.ToUpper(id[:1]) + id[1:]
}

// localSettings are the settings of a session of this process.
type localSettings struct {
	s      *session.Session
	models func() []*llm.Model
}

func (l localSettings) available() []*llm.Model {
	if l.models == nil {
		return []*llm.Model{l.s.Model()}
	}
	return l.models()
}

func (l localSettings) settings(context.Context) (settingsView, error) {
	v := settingsView{mode: l.s.Mode().Name, thinking: string(l.s.Thinking())}
	for _, m := range l.s.Modes() {
		v.modes = append(v.modes, sessionMode{ID: m.Name, Name: modeName(m.Name), Description: m.Description})
	}
	cur := l.s.Model()
	v.model, v.levels = modelID(cur), levelsOf(cur)
	for _, m := range l.available() {
		v.models = append(v.models, modelInfoOf(m))
	}
	return v, nil
}

func (l localSettings) setMode(_ context.Context, id string) error { return l.s.SetMode(id) }

func (l localSettings) setModel(_ context.Context, id string) error {
	for _, m := range l.available() {
		if modelID(m) == id {
			return l.s.SetModel(m)
		}
	}
	return fault.Errorf(fault.Invalid, "model %q is not available; see the models of session/new", id)
}

func (l localSettings) setThinking(_ context.Context, level string) error {
	lv, err := llm.ParseThinkingLevel(level)
	if err != nil {
		return fault.New(fault.Invalid, err.Error())
	}
	_, err = l.s.SetThinking(lv)
	return err
}

// remote settings: a session of agentd serve, through pi-server's
// commands.

func (s *remoteSession) settings(ctx context.Context) (settingsView, error) {
	var v settingsView
	var ms piwire.Modes
	if err := s.r.call(ctx, map[string]any{"type": "get_modes", "sessionId": s.id}, &ms); err != nil {
		return v, err
	}
	v.mode = ms.Mode
	for _, m := range ms.Modes {
		v.modes = append(v.modes, sessionMode{ID: m.Name, Name: modeName(m.Name), Description: m.Description})
	}
	var st struct {
		Model         *llm.Model `json:"model"`
		ThinkingLevel string     `json:"thinkingLevel"`
	}
	if err := s.r.call(ctx, map[string]any{"type": "get_state", "sessionId": s.id}, &st); err != nil {
		return v, err
	}
	if st.Model != nil {
		v.model, v.levels = modelID(st.Model), levelsOf(st.Model)
	}
	v.thinking = st.ThinkingLevel
	var av struct {
		Models []*llm.Model `json:"models"`
	}
	if err := s.r.call(ctx, map[string]any{"type": "get_available_models", "sessionId": s.id}, &av); err != nil {
		return v, err
	}
	for _, m := range av.Models {
		v.models = append(v.models, modelInfoOf(m))
	}
	return v, nil
}

func (s *remoteSession) setMode(ctx context.Context, id string) error {
	return fromRemote(s.r.call(ctx, map[string]any{"type": "set_mode", "sessionId": s.id, "mode": id}, nil))
}

func (s *remoteSession) setModel(ctx context.Context, id string) error {
	provider, model, ok := strings.Cut(id, "/")
	if !ok {
		return fault.Errorf(fault.Invalid, "model %q: want provider/id, as the models of session/new name them", id)
	}
	return fromRemote(s.r.call(ctx, map[string]any{"type": "set_model", "sessionId": s.id, "provider": provider, "modelId": model}, nil))
}

func (s *remoteSession) setThinking(ctx context.Context, level string) error {
	return fromRemote(s.r.call(ctx, map[string]any{"type": "set_thinking_level", "sessionId": s.id, "level": level}, nil))
}

// setup is the answer of session/new and session/load for ss: its
// settings as modes, models and configOptions. A session whose settings
// cannot be read is answered without them.
func (ss *acpSession) setup(ctx context.Context, id string) sessionSetup {
	r := sessionSetup{Meta: ss.meta(ctx)}
	if id != "" {
		r.newSessionResult = &newSessionResult{SessionID: id}
	}
	if ss.cfg == nil {
		return r
	}
	v, err := ss.cfg.settings(ctx)
	if err != nil {
		ss.a.log.Warn("reading the session's settings", "session", ss.id, "err", err)
		return r
	}
	ss.mu.Lock()
	ss.view = v
	ss.mu.Unlock()
	if len(v.modes) > 0 {
		r.Modes = &sessionModeState{CurrentModeID: v.mode, AvailableModes: v.modes}
	}
	if len(v.models) > 0 {
		r.Models = &sessionModelState{CurrentModelID: v.model, AvailableModels: v.models}
	}
	r.ConfigOptions = v.options()
	return r
}

// options are the session's config options.
func (v settingsView) options() []configOption {
	out := []configOption{}
	if len(v.modes) > 0 {
		o := configOption{ID: optMode, Name: "Mode", Category: "mode", Type: "select", CurrentValue: v.mode,
			Description: "What the agent may do: build changes files, plan only looks and proposes"}
		for _, m := range v.modes {
			o.Options = append(o.Options, configSelectOption{Value: m.ID, Name: m.Name, Description: m.Description})
		}
		out = append(out, o)
	}
	if len(v.models) > 0 {
		o := configOption{ID: optModel, Name: "Model", Category: "model", Type: "select", CurrentValue: v.model}
		for _, m := range v.models {
			o.Options = append(o.Options, configSelectOption{Value: m.ModelID, Name: m.Name, Description: m.Description})
		}
		out = append(out, o)
	}
	if len(v.levels) > 1 {
		o := configOption{ID: optThinking, Name: "Thinking", Category: "thought_level", Type: "select", CurrentValue: v.thinking}
		for _, l := range v.levels {
			o.Options = append(o.Options, configSelectOption{Value: l, Name: modeName(l)})
		}
		out = append(out, o)
	}
	return out
}

// changed records a change of the settings made here or announced by
// the session, and tells the client when something it was shown
// differs: current_mode_update for the mode, config_option_update for
// any option.
func (ss *acpSession) changed(f func(v *settingsView)) {
	ss.mu.Lock()
	before := ss.view
	f(&ss.view)
	after := ss.view
	ss.mu.Unlock()
	if before.modes == nil && before.models == nil {
		return // never shown to the client
	}
	if after.mode != before.mode {
		ss.update(currentModeUpdate{SessionUpdate: "current_mode_update", CurrentModeID: after.mode})
	}
	if after.mode != before.mode || after.model != before.model || after.thinking != before.thinking || !slices.Equal(after.levels, before.levels) {
		ss.update(configOptionUpdate{SessionUpdate: "config_option_update", ConfigOptions: after.options()})
	}
}

// settingsEvent follows the session's own announcements of a change.
func (ss *acpSession) settingsEvent(ev session.Event) {
	switch ev.Type {
	case session.EventConfigChanged:
		if ev.Config != nil && ev.Config.Changed == "mode" {
			ss.changed(func(v *settingsView) { v.mode = ev.Config.Mode })
		}
	case session.EventModelChanged:
		if m := ev.Model; m != nil && m.ID != "" {
			ss.changed(func(v *settingsView) { v.model, v.levels = modelID(m), levelsOf(m) })
		}
	case session.EventThinkingLevelChanged:
		ss.changed(func(v *settingsView) { v.thinking = string(ev.ThinkingLevel) })
	}
}

func (a *Agent) setSessionMode(ctx context.Context, params json.RawMessage) (any, error) {
	const method = "session/set_mode"
	var p setModeParams
	if err := decodeParams(method, params, &p); err != nil {
		return nil, err
	}
	ss, err := a.configurable(method, p.SessionID)
	if err != nil {
		return nil, err
	}
	if p.ModeID == "" {
		return nil, invalidParams(method, "modeId is required")
	}
	if err := ss.set(ctx, optMode, p.ModeID); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

func (a *Agent) setSessionModel(ctx context.Context, params json.RawMessage) (any, error) {
	const method = "session/set_model"
	var p setModelParams
	if err := decodeParams(method, params, &p); err != nil {
		return nil, err
	}
	ss, err := a.configurable(method, p.SessionID)
	if err != nil {
		return nil, err
	}
	if p.ModelID == "" {
		return nil, invalidParams(method, "modelId is required")
	}
	if err := ss.set(ctx, optModel, p.ModelID); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

func (a *Agent) setConfigOption(ctx context.Context, params json.RawMessage) (any, error) {
	const method = "session/set_config_option"
	var p setConfigParams
	if err := decodeParams(method, params, &p); err != nil {
		return nil, err
	}
	ss, err := a.configurable(method, p.SessionID)
	if err != nil {
		return nil, err
	}
	var value string
	if err := json.Unmarshal(p.Value, &value); err != nil || value == "" {
		return nil, invalidParams(method, "value must be a non-empty string (an option's value)")
	}
	switch p.ConfigID {
	case optMode, optModel, optThinking:
	case "":
		return nil, invalidParams(method, "configId is required")
	default:
		return nil, invalidParams(method, "unknown configId %q: this agent's options are %s, %s and %s", p.ConfigID, optMode, optModel, optThinking)
	}
	if err := ss.set(ctx, p.ConfigID, value); err != nil {
		return nil, err
	}
	ss.mu.Lock()
	opts := ss.view.options()
	ss.mu.Unlock()
	return setConfigResult{ConfigOptions: opts}, nil
}

// configurable is the session of id for a settings method.
func (a *Agent) configurable(method, id string) (*acpSession, error) {
	ss, err := a.session(method, id)
	if err != nil {
		return nil, err
	}
	if ss.cfg == nil {
		return nil, &Error{Code: CodeMethodNotFound, Message: method + " is not supported for this session"}
	}
	return ss, nil
}

// set changes one setting and records it in the view. A value the
// session was not shown as an option is refused first, naming those it
// was (the same for a local session and one of agentd serve).
func (ss *acpSession) set(ctx context.Context, option, value string) error {
	ss.mu.Lock()
	v := ss.view
	ss.mu.Unlock()
	var allowed []string
	switch option {
	case optMode:
		for _, m := range v.modes {
			allowed = append(allowed, m.ID)
		}
	case optModel:
		for _, m := range v.models {
			allowed = append(allowed, m.ModelID)
		}
	case optThinking:
		allowed = v.levels
	}
	if allowed != nil && !slices.Contains(allowed, value) {
		shown := value
		if r := []rune(shown); len(r) > 128 {
			shown = string(r[:128]) + "…" // no more of the client's text than a name
		}
		return fault.Errorf(fault.Invalid, "unknown %s %q; this session's are %s", option, shown, strings.Join(allowed, ", "))
	}
	var err error
	switch option {
	case optMode:
		err = ss.cfg.setMode(ctx, value)
	case optModel:
		err = ss.cfg.setModel(ctx, value)
	case optThinking:
		err = ss.cfg.setThinking(ctx, value)
	}
	if err != nil {
		return err
	}
	// Read back: a model change may clamp the thinking level, a
	// thinking level be clamped to the model.
	v, rerr := ss.cfg.settings(ctx)
	if rerr != nil {
		ss.a.log.Warn("reading the session's settings", "session", ss.id, "err", rerr)
		return nil
	}
	ss.changed(func(cur *settingsView) { *cur = v })
	return nil
}

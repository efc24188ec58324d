package picommand

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/commands"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/registry"
	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/settings"
)

// table holds pi's commands that run the same way on both faces. pirpc
// runs every one; piserver runs all but get_state (its answer is the
// session's pi-server SessionInfo, which holds this state) and
// switch_session (its own switch_session watches another session). It
// is built on first use, not at init (TestInitBudget).
var table = sync.OnceValue(func() map[string]Command {
	return map[string]Command{
		"steer":     {Check: CheckMessage, Run: steer},
		"follow_up": {Check: CheckMessage, Run: steer},
		"get_state": {Run: func(_ context.Context, e Env, _ string, _ *piwire.Fields) (any, error) {
			return piwire.StateOf(e.Session), nil
		}},
		"abort": {Run: func(_ context.Context, e Env, _ string, _ *piwire.Fields) (any, error) {
			e.Session.Abort()
			return nil, nil
		}},
		"abort_retry": {Run: func(_ context.Context, e Env, _ string, _ *piwire.Fields) (any, error) {
			e.Session.AbortRetry()
			return nil, nil
		}},
		"abort_bash": {Run: func(_ context.Context, e Env, _ string, _ *piwire.Fields) (any, error) {
			e.Session.AbortBash()
			return nil, nil
		}},
		"get_messages": {Run: func(_ context.Context, e Env, _ string, _ *piwire.Fields) (any, error) {
			return json.RawMessage(Messages(e.Session)), nil
		}},
		"set_model":            {Run: setModel},
		"get_available_models": {Run: availableModels},
		"cycle_thinking_level": {Run: cycleThinking},
		"set_steering_mode":    {Check: checkQueueMode, Run: setQueueMode},
		"set_follow_up_mode":   {Check: checkQueueMode, Run: setQueueMode},
		"compact": {Run: func(ctx context.Context, e Env, _ string, f *piwire.Fields) (any, error) {
			return e.Session.Compact(ctx, f.CustomInstructions)
		}},
		"set_auto_compaction": {Check: checkEnabled, Run: setAuto},
		"set_auto_retry":      {Check: checkEnabled, Run: setAuto},
		"get_session_stats": {Run: func(_ context.Context, e Env, _ string, _ *piwire.Fields) (any, error) {
			return piwire.SessionStats(e.Session.Stats()), nil
		}},
		"export_html": {Run: func(_ context.Context, e Env, _ string, f *piwire.Fields) (any, error) {
			path, err := e.Export(f.OutputPath, f.Overwrite)
			if err != nil {
				return nil, err
			}
			return map[string]string{"path": path}, nil
		}},
		// switch_session is pi's: load a transcript file in place of the
		// session's. (pi-server's switch_session_file does the same once the
		// server has checked the path: server.SwitchFile.)
		"switch_session": {
			Check: func(typ string, f *piwire.Fields) error { return require(f.SessionPath != "", typ, `a "sessionPath"`) },
			Run: func(_ context.Context, e Env, _ string, f *piwire.Fields) (any, error) {
				return notCancelled, e.Session.Switch(f.SessionPath)
			},
		},
		"new_session": {Run: func(_ context.Context, e Env, _ string, f *piwire.Fields) (any, error) {
			return notCancelled, e.Session.NewSession(f.ParentSession)
		}},
		"fork": {
			Check: func(typ string, f *piwire.Fields) error { return require(f.EntryID != "", typ, `an "entryId"`) },
			Run:   fork,
		},
		"clone": {Run: func(_ context.Context, e Env, _ string, _ *piwire.Fields) (any, error) {
			return notCancelled, e.Session.Clone()
		}},
		"get_fork_messages":       {Run: forkMessages},
		"get_last_assistant_text": {Run: lastText},
		"set_session_name":        {Check: checkName, Run: setName},
		"get_commands": {Run: func(_ context.Context, e Env, _ string, _ *piwire.Fields) (any, error) {
			return map[string]any{"commands": commands.Of(e.Session).List()}, nil
		}},
		"get_skills": {Run: func(_ context.Context, e Env, _ string, _ *piwire.Fields) (any, error) {
			return map[string]any{"skills": Skills(e.Session)}, nil
		}},
		"get_modes": {Run: func(_ context.Context, e Env, _ string, _ *piwire.Fields) (any, error) {
			return piwire.ModesOf(e.Session), nil
		}},
		"set_mode": {
			Check: func(typ string, f *piwire.Fields) error { return require(f.Mode != "", typ, `a "mode" string`) },
			Run: func(_ context.Context, e Env, _ string, f *piwire.Fields) (any, error) {
				if err := e.Session.SetMode(f.Mode); err != nil {
					return nil, err
				}
				return piwire.ModesOf(e.Session), nil
			},
		},
		// agentd's checkpoint commands.
		piwire.CmdGetCheckpoints: {Run: checkpoints},
		piwire.CmdGetTurnDiff:    {Run: checkpoints},
		piwire.CmdRevertTurn:     {Run: checkpoints},
		piwire.CmdUndoRevert:     {Run: checkpoints},
	}
})

// notCancelled is the answer of the commands that move the session to
// another transcript: pi's extensions may cancel them; agentd's never do.
var notCancelled = map[string]bool{"cancelled": false}

// Messages is get_messages' data, {"messages": [...]}, encoded by hand:
// a long conversation is the largest answer there is.
func Messages(s *session.Session) []byte {
	b := append([]byte(nil), `{"messages":`...)
	b = piwire.AppendMessages(b, s.Messages())
	return append(b, '}')
}

// Skills is get_skills' list: pi's Skill objects, never null.
func Skills(s *session.Session) []commands.Skill {
	sk := commands.Of(s).Skills()
	if sk == nil {
		sk = []commands.Skill{}
	}
	return sk
}

// CheckMessage checks a prompt's, steer's or follow_up's message and
// images.
func CheckMessage(typ string, f *piwire.Fields) error {
	if err := require(f.Message != nil, typ, `a "message" string`); err != nil {
		return err
	}
	for i, img := range f.Images {
		if img.Type != llm.ContentImage || img.Data == "" || img.MimeType == "" {
			return fault.Errorf(fault.Invalid, "images[%d] must be {type: \"image\", data, mimeType}", i)
		}
	}
	return nil
}

// Behavior is what a prompt's streamingBehavior asks of a prompt sent
// while a run is in progress, refused in pi's words if it is neither.
func Behavior(streamingBehavior string) (session.Behavior, error) {
	switch streamingBehavior {
	case "":
		return session.BehaviorNone, nil
	case "steer":
		return session.BehaviorSteer, nil
	case "followUp":
		return session.BehaviorFollowUp, nil
	}
	return session.BehaviorNone, fault.Errorf(fault.Invalid, "Invalid streamingBehavior %q: use \"steer\" or \"followUp\"", streamingBehavior)
}

// steer queues a steer or a follow_up, running or not: it is delivered
// after the current turn, or with the next prompt's run.
func steer(_ context.Context, e Env, typ string, f *piwire.Fields) (any, error) {
	m := session.UserMessage(*f.Message, f.Images)
	if typ == "steer" {
		return nil, e.Session.Steer(m)
	}
	return nil, e.Session.FollowUp(m)
}

// SetModel switches the session to the available model provider/modelID
// and returns it.
func SetModel(e Env, provider, modelID string) (*llm.Model, error) {
	m, err := registry.Pick(e.Models.Available(), provider+"/"+modelID)
	if err != nil {
		return nil, fault.Errorf(fault.Invalid, "Model not found: %s/%s", provider, modelID)
	}
	if err := e.Session.SetModel(m); err != nil {
		return nil, err
	}
	e.persist(func(st *settings.Settings) { st.DefaultProvider, st.DefaultModel = m.Provider, m.ID })
	return m, nil
}

// setModel answers with the model itself, as pi's RPC mode does
// (pi-server wraps it in {"model": ...}).
func setModel(_ context.Context, e Env, _ string, f *piwire.Fields) (any, error) {
	return SetModel(e, f.Provider, f.ModelID)
}

// CycleModel moves to the next (or previous) available model: the data
// is the model with the thinking level, or Null when there is no other.
func CycleModel(e Env, backward bool) (any, error) {
	next, ok, err := e.Session.CycleModel(e.Models.Available(), backward)
	if err != nil || !ok {
		return Null, err
	}
	e.persist(func(st *settings.Settings) { st.DefaultProvider, st.DefaultModel = next.Provider, next.ID })
	return map[string]any{"model": next, "thinkingLevel": e.Session.Thinking(), "isScoped": false}, nil
}

func availableModels(_ context.Context, e Env, _ string, _ *piwire.Fields) (any, error) {
	models := e.Models.Available()
	if models == nil {
		models = []*llm.Model{}
	}
	return map[string]any{"models": models}, nil
}

// SetThinking sets the session's thinking level (clamped to what the
// model supports) and persists what it became.
func SetThinking(e Env, level llm.ThinkingLevel) error {
	got, err := e.Session.SetThinking(level)
	if err != nil {
		return err
	}
	e.persist(func(st *settings.Settings) { st.DefaultThinkingLevel = string(got) })
	return nil
}

func cycleThinking(_ context.Context, e Env, _ string, _ *piwire.Fields) (any, error) {
	got, ok, err := e.Session.CycleThinking()
	if err != nil || !ok {
		return Null, err
	}
	e.persist(func(st *settings.Settings) { st.DefaultThinkingLevel = string(got) })
	return map[string]any{"level": got}, nil
}

func checkQueueMode(_ string, f *piwire.Fields) error {
	if mode := agent.QueueMode(f.Mode); mode != agent.All && mode != agent.OneAtATime {
		return fault.Errorf(fault.Invalid, "Invalid mode %q: use \"all\" or \"one-at-a-time\"", f.Mode)
	}
	return nil
}

func setQueueMode(_ context.Context, e Env, typ string, f *piwire.Fields) (any, error) {
	mode := agent.QueueMode(f.Mode)
	if typ == "set_steering_mode" {
		e.Session.SetQueueModes(mode, "")
		e.persist(func(st *settings.Settings) { st.SteeringMode = f.Mode })
	} else {
		e.Session.SetQueueModes("", mode)
		e.persist(func(st *settings.Settings) { st.FollowUpMode = f.Mode })
	}
	return nil, nil
}

func checkEnabled(typ string, f *piwire.Fields) error {
	return require(f.Enabled != nil, typ, `an "enabled" boolean`)
}

func setAuto(_ context.Context, e Env, typ string, f *piwire.Fields) (any, error) {
	on := *f.Enabled
	if typ == "set_auto_compaction" {
		e.Session.SetAutoCompaction(on)
		e.persist(func(st *settings.Settings) {
			if st.Compaction == nil {
				st.Compaction = &settings.Compaction{}
			}
			st.Compaction.Enabled = settings.Ptr(on)
		})
	} else {
		e.Session.SetAutoRetry(on)
		e.persist(func(st *settings.Settings) {
			if st.Retry == nil {
				st.Retry = &settings.Retry{}
			}
			st.Retry.Enabled = settings.Ptr(on)
		})
	}
	return nil, nil
}

func fork(_ context.Context, e Env, _ string, f *piwire.Fields) (any, error) {
	text, err := e.Session.Fork(f.EntryID)
	if err != nil {
		return nil, err
	}
	return struct {
		Text      string `json:"text"`
		Cancelled bool   `json:"cancelled"`
	}{text, false}, nil
}

func forkMessages(_ context.Context, e Env, _ string, _ *piwire.Fields) (any, error) {
	type fm struct {
		EntryID string `json:"entryId"`
		Text    string `json:"text"`
	}
	out := []fm{}
	for _, m := range e.Session.ForkMessages() {
		out = append(out, fm{m.EntryID, m.Text})
	}
	return map[string]any{"messages": out}, nil
}

func lastText(_ context.Context, e Env, _ string, _ *piwire.Fields) (any, error) {
	text, ok := e.Session.LastAssistantText()
	var v any
	if ok {
		v = text
	}
	return map[string]any{"text": v}, nil
}

// checkName is pi's check of a session name: present, and not blank.
func checkName(typ string, f *piwire.Fields) error {
	if err := require(f.Name != nil, typ, `a "name" string`); err != nil {
		return err
	}
	if strings.TrimSpace(*f.Name) == "" {
		return fault.New(fault.Invalid, "Session name cannot be empty")
	}
	return nil
}

func setName(_ context.Context, e Env, _ string, f *piwire.Fields) (any, error) {
	return nil, e.Session.SetName(strings.TrimSpace(*f.Name))
}

func checkpoints(ctx context.Context, e Env, typ string, f *piwire.Fields) (any, error) {
	return piwire.CheckpointCommand(ctx, e.Session, typ, *f)
}

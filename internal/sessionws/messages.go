package sessionws

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/server"
)

// The server's messages, field for field as schema.json describes them.

type subscribedMsg struct {
	Type               string  `json:"type"`
	SessionID          string  `json:"session_id"`
	CurrentState       string  `json:"current_state"`
	ProgressPercentage float64 `json:"progress_percentage"`
	SubscribedAt       string  `json:"subscribed_at"`
	Seq                uint64  `json:"seq"`
	Resumed            bool    `json:"resumed"`
	CursorTooOld       bool    `json:"cursor_too_old,omitempty"`
}

type unsubscribedMsg struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	Timestamp string `json:"timestamp"`
	Seq       uint64 `json:"seq"`
}

type details struct {
	Turns            int        `json:"turns"`
	ToolCalls        int        `json:"tool_calls"`
	ToolErrors       int        `json:"tool_errors"`
	InputTokens      int64      `json:"input_tokens"`
	OutputTokens     int64      `json:"output_tokens"`
	CacheReadTokens  int64      `json:"cache_read_tokens"`
	CacheWriteTokens int64      `json:"cache_write_tokens"`
	TotalTokens      int64      `json:"total_tokens"`
	CostUSD          float64    `json:"cost_usd"`
	ElapsedSeconds   float64    `json:"elapsed_seconds"`
	FilesChanged     []string   `json:"files_changed"`
	PendingQuestions []string   `json:"pending_questions"`
	Plan             []planItem `json:"plan,omitempty"`
}

type planItem struct {
	ID      int    `json:"id"`
	Content string `json:"content"`
	Status  string `json:"status"`
}

type progressMsg struct {
	Type               string  `json:"type"`
	SessionID          string  `json:"session_id"`
	Timestamp          string  `json:"timestamp"`
	Seq                uint64  `json:"seq"`
	State              string  `json:"state"`
	CurrentStep        string  `json:"current_step"`
	StepTitle          string  `json:"step_title,omitempty"`
	StepIndex          int     `json:"step_index"`
	TotalSteps         *int    `json:"total_steps"`
	ProgressPercentage float64 `json:"progress_percentage"`
	Message            string  `json:"message"`
	Details            details `json:"details"`
}

type statusChangeMsg struct {
	Type               string  `json:"type"`
	SessionID          string  `json:"session_id"`
	Timestamp          string  `json:"timestamp"`
	Seq                uint64  `json:"seq"`
	OldState           string  `json:"old_state"`
	NewState           string  `json:"new_state"`
	ProgressPercentage float64 `json:"progress_percentage"`
	Reason             string  `json:"reason"`
	Version            int     `json:"version,omitempty"`
}

// errorMsg is both kinds of error: a refused client message (Code) and a
// failure in the session (ErrorType and the rest).
type errorMsg struct {
	Type                string         `json:"type"`
	Code                string         `json:"code,omitempty"`
	SessionID           string         `json:"session_id,omitempty"`
	Timestamp           string         `json:"timestamp"`
	Seq                 *uint64        `json:"seq,omitempty"`
	Message             string         `json:"message"`
	Details             map[string]any `json:"details,omitempty"`
	SupportedTypes      []string       `json:"supported_types,omitempty"`
	ErrorType           string         `json:"error_type,omitempty"`
	Severity            string         `json:"severity,omitempty"`
	Recoverable         *bool          `json:"recoverable,omitempty"`
	RecoverySuggestions []string       `json:"recovery_suggestions,omitempty"`
}

type usageJSON struct {
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

type results struct {
	Output       string    `json:"output"`
	FilesChanged []string  `json:"files_changed"`
	Turns        int       `json:"turns"`
	ToolCalls    int       `json:"tool_calls"`
	ToolErrors   int       `json:"tool_errors"`
	Usage        usageJSON `json:"usage"`
	CostUSD      float64   `json:"cost_usd"`
	EntryID      string    `json:"entry_id,omitempty"`
	Error        string    `json:"error,omitempty"`
}

type completedMsg struct {
	Type               string  `json:"type"`
	SessionID          string  `json:"session_id"`
	Timestamp          string  `json:"timestamp"`
	Seq                uint64  `json:"seq"`
	FinalState         string  `json:"final_state"`
	ProgressPercentage float64 `json:"progress_percentage"`
	DurationSeconds    float64 `json:"duration_seconds"`
	Results            results `json:"results"`
}

type field struct {
	FieldName  string         `json:"field_name"`
	FieldType  string         `json:"field_type"`
	Label      string         `json:"label,omitempty"`
	Required   bool           `json:"required"`
	Validation map[string]any `json:"validation,omitempty"`
	HelpText   string         `json:"help_text,omitempty"`
	Default    any            `json:"default,omitempty"`
}

type toolJSON struct {
	ToolCallID string          `json:"tool_call_id"`
	ToolName   string          `json:"tool_name"`
	Args       json.RawMessage `json:"args,omitempty"`
}

type prompt struct {
	QuestionID string         `json:"question_id"`
	Kind       string         `json:"kind"`
	Question   string         `json:"question"`
	FieldName  string         `json:"field_name"`
	FieldType  string         `json:"field_type"`
	Required   bool           `json:"required"`
	Validation map[string]any `json:"validation"`
	HelpText   string         `json:"help_text,omitempty"`
	Default    any            `json:"default,omitempty"`
	Fields     []field        `json:"fields"`
	Tool       *toolJSON      `json:"tool,omitempty"`
}

type inputRequiredMsg struct {
	Type            string   `json:"type"`
	SessionID       string   `json:"session_id"`
	Timestamp       string   `json:"timestamp"`
	Seq             uint64   `json:"seq"`
	SuspendedAtStep string   `json:"suspended_at_step"`
	Prompt          prompt   `json:"prompt"`
	TimeoutSeconds  *float64 `json:"timeout_seconds"`
}

type inputReceivedMsg struct {
	Type       string `json:"type"`
	SessionID  string `json:"session_id"`
	QuestionID string `json:"question_id"`
	Timestamp  string `json:"timestamp"`
	Seq        uint64 `json:"seq"`
}

type checkpoint struct {
	Version       int    `json:"version"`
	State         string `json:"state"`
	PreviousState string `json:"previous_state,omitempty"`
	Reason        string `json:"reason,omitempty"`
	CreatedAt     string `json:"created_at"`
	Seq           uint64 `json:"seq,omitempty"`
	EntryID       string `json:"entry_id,omitempty"`
}

type snapshotMsg struct {
	Type               string              `json:"type"`
	SessionID          string              `json:"session_id"`
	Timestamp          string              `json:"timestamp"`
	Seq                uint64              `json:"seq"`
	State              string              `json:"state"`
	CurrentStep        string              `json:"current_step"`
	StepTitle          string              `json:"step_title,omitempty"`
	StepIndex          int                 `json:"step_index"`
	TotalSteps         *int                `json:"total_steps"`
	ProgressPercentage float64             `json:"progress_percentage"`
	Message            string              `json:"message"`
	CreatedAt          string              `json:"created_at"`
	UpdatedAt          string              `json:"updated_at"`
	Checkpoints        []checkpoint        `json:"checkpoints"`
	PendingInputs      []*inputRequiredMsg `json:"pending_inputs"`
	Details            details             `json:"details"`
}

type pingMsg struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
}

type pongMsg struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
}

// encode is one message as sent: JSON and a newline, as the spec frames
// it.
func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own types are encoded; a failure is a bug.
		panic(fmt.Sprintf("sessionws: encoding %T: %v", v, err))
	}
	return append(b, '\n')
}

// stamp is the spec's timestamp form, in UTC with milliseconds.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func protocolError(code, msg string, det map[string]any, now time.Time) *errorMsg {
	return &errorMsg{Type: "error", Code: code, Message: msg, Details: det, Timestamp: stamp(now)}
}

func detailsOf(st server.Status, now time.Time) details {
	d := details{FilesChanged: []string{}, PendingQuestions: []string{}}
	if r := st.Run; r != nil {
		d.Turns, d.ToolCalls, d.ToolErrors = r.Turns, r.ToolCalls, r.ToolErrors
		d.InputTokens, d.OutputTokens = r.Usage.Input, r.Usage.Output
		d.CacheReadTokens, d.CacheWriteTokens = r.Usage.CacheRead, r.Usage.CacheWrite
		d.TotalTokens = totalTokens(r.Usage)
		d.CostUSD = r.Usage.Cost.Total
		end := r.Ended
		if end.IsZero() {
			end = now
		}
		if !r.Started.IsZero() {
			d.ElapsedSeconds = seconds(end.Sub(r.Started))
		}
		if r.FilesChanged != nil {
			d.FilesChanged = r.FilesChanged
		}
	}
	for _, it := range st.Plan.Items {
		d.Plan = append(d.Plan, planItem{ID: it.ID, Content: it.Content, Status: string(it.Status)})
	}
	return d
}

func totalTokens(u llm.Usage) int64 {
	if u.TotalTokens > 0 {
		return u.TotalTokens
	}
	return u.Input + u.Output + u.CacheRead + u.CacheWrite
}

func seconds(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }

func totalSteps(s server.Step) *int {
	if s.Total == 0 {
		return nil
	}
	n := s.Total
	return &n
}

// progress is the session's progress now, ordered after event seq.
func (w *watch) progress(seq uint64, now time.Time) *progressMsg {
	st := w.v.Status()
	d := detailsOf(st, now)
	for _, r := range w.v.Interactions() {
		d.PendingQuestions = append(d.PendingQuestions, r.ID)
	}
	return &progressMsg{Type: "progress_update", SessionID: w.id, Timestamp: stamp(now), Seq: seq,
		State: st.State, CurrentStep: st.Step.ID, StepTitle: st.Step.Title, StepIndex: st.Step.Index, TotalSteps: totalSteps(st.Step),
		ProgressPercentage: st.Step.Percent, Message: st.Activity, Details: d}
}

// snapshot is query_state's answer: the status, the history of state
// changes, and what waits on a person.
func (c *conn) snapshot(now time.Time) *snapshotMsg {
	v := c.view()
	st := v.Status()
	d := detailsOf(st, now)
	hist := v.History()
	cps := make([]checkpoint, len(hist))
	for i, tr := range hist {
		cps[i] = checkpoint{Version: tr.Version, State: tr.New, PreviousState: tr.Old, Reason: tr.Reason, CreatedAt: stamp(tr.Time), Seq: tr.Seq, EntryID: tr.EntryID}
	}
	w := &watch{f: c.f, h: c.hosted(), v: v, id: c.id}
	var pending []*inputRequiredMsg
	for _, r := range v.Interactions() {
		pending = append(pending, w.inputRequired(r, st.Seq, now))
		d.PendingQuestions = append(d.PendingQuestions, r.ID)
	}
	if pending == nil {
		pending = []*inputRequiredMsg{}
	}
	return &snapshotMsg{Type: "state_snapshot", SessionID: c.id, Timestamp: stamp(now), Seq: st.Seq, State: st.State,
		CurrentStep: st.Step.ID, StepTitle: st.Step.Title, StepIndex: st.Step.Index, TotalSteps: totalSteps(st.Step),
		ProgressPercentage: st.Step.Percent, Message: st.Activity, CreatedAt: stamp(v.Created()), UpdatedAt: stamp(st.Updated),
		Checkpoints: cps, PendingInputs: pending, Details: d}
}

func completedOf(id string, seq uint64, now time.Time, tr server.Transition) *completedMsg {
	m := &completedMsg{Type: "completed", SessionID: id, Timestamp: stamp(now), Seq: seq, FinalState: tr.New,
		ProgressPercentage: tr.Percent, Results: results{FilesChanged: []string{}, EntryID: tr.EntryID}}
	if r := tr.Run; r != nil {
		if !r.Started.IsZero() && !r.Ended.IsZero() {
			m.DurationSeconds = seconds(r.Ended.Sub(r.Started))
		}
		m.Results.Output = r.LastText
		if r.FilesChanged != nil {
			m.Results.FilesChanged = r.FilesChanged
		}
		m.Results.Turns, m.Results.ToolCalls, m.Results.ToolErrors = r.Turns, r.ToolCalls, r.ToolErrors
		m.Results.Usage = usageJSON{InputTokens: r.Usage.Input, OutputTokens: r.Usage.Output, CacheReadTokens: r.Usage.CacheRead,
			CacheWriteTokens: r.Usage.CacheWrite, TotalTokens: totalTokens(r.Usage)}
		m.Results.CostUSD = r.Usage.Cost.Total
		if r.Error != nil && tr.New == server.StateFailed {
			m.Results.Error = r.Error.Message
		}
	}
	return m
}

// inputRequired is one pending interaction as the spec's prompt.
func (w *watch) inputRequired(r interaction.Request, seq uint64, now time.Time) *inputRequiredMsg {
	var left *float64
	if !r.ExpiresAt.IsZero() {
		s := math.Max(0, math.Ceil(r.ExpiresAt.Sub(now).Seconds()))
		left = &s
	}
	return &inputRequiredMsg{Type: "input_required", SessionID: w.id, Timestamp: stamp(now), Seq: seq,
		SuspendedAtStep: w.v.Status().Step.ID, Prompt: promptOf(r), TimeoutSeconds: left}
}

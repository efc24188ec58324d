package piserver

import (
	"context"
	"encoding/json"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/health"
	"github.com/agentd-dev/agentd/internal/session"
)

// The session tree commands pi-server added after protocol 1.0.0
// (docs/pi-server-wire.md §14.7): get_tree shows every entry of a session's
// transcript, navigate_tree moves the session to one of them.

var (
	fTargetID    = field{name: "targetId", kind: kString, required: true, inner: nonEmpty("targetId")}
	fTreeOptions = field{name: "options", kind: kObject, inner: checkTreeOptions}
)

func nonEmpty(name string) func(json.RawMessage) []string {
	return func(raw json.RawMessage) []string {
		if string(raw) == `""` {
			return []string{name + ": must be a non-empty string"}
		}
		return nil
	}
}

// checkTreeOptions checks navigate_tree's options as pi-server does, in
// its words: each field, if present, has its type.
func checkTreeOptions(raw json.RawMessage) []string {
	var opts map[string]json.RawMessage
	if json.Unmarshal(raw, &opts) != nil {
		return nil // the kind check has reported it
	}
	var problems []string
	for _, f := range []struct {
		name string
		kind fieldKind
	}{{"summarize", kBool}, {"customInstructions", kString}, {"replaceInstructions", kBool}, {"label", kString}} {
		v, ok := opts[f.name]
		if !ok {
			continue
		}
		// Unlike a top-level field, null is not absence here: pi-server
		// refuses it.
		if string(v) != "null" && (field{kind: f.kind}).check(v) == "" {
			continue
		}
		what := "a string"
		if f.kind == kBool {
			what = "a boolean"
		}
		problems = append(problems, "options."+f.name+": Must be "+what+" if provided")
	}
	return problems
}

// treeNode is pi-server's SessionTreeNodePayload.
type treeNode struct {
	EntryID   string  `json:"entryId"`
	ParentID  *string `json:"parentId"`
	EntryType string  `json:"entryType"`
	Role      *string `json:"role"`
	Text      string  `json:"text"`
	Timestamp *string `json:"timestamp"`
	Label     string  `json:"label,omitempty"`
}

// orNull is s, or JSON null when it is empty.
func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (s *Server) getTree(_ context.Context, c *call) (any, error) {
	t := c.h.Session().Tree()
	nodes := make([]treeNode, len(t.Nodes))
	for i, n := range t.Nodes {
		nodes[i] = treeNode{EntryID: n.EntryID, ParentID: orNull(n.ParentID), EntryType: string(n.Type),
			Role: orNull(string(n.Role)), Text: n.Text, Timestamp: orNull(n.Timestamp), Label: n.Label}
	}
	return struct {
		CurrentLeafID *string    `json:"currentLeafId"`
		Nodes         []treeNode `json:"nodes"`
	}{orNull(t.LeafID), nodes}, nil
}

func (s *Server) navigateTree(ctx context.Context, c *call) (any, error) {
	var p struct {
		TargetID string `json:"targetId"`
		Options  struct {
			Summarize           bool   `json:"summarize"`
			CustomInstructions  string `json:"customInstructions"`
			ReplaceInstructions bool   `json:"replaceInstructions"`
			Label               string `json:"label"`
		} `json:"options"`
	}
	// The decoder has checked every field read here.
	if err := json.Unmarshal(c.cmd.Payload, &p); err != nil {
		return nil, fault.Errorf(fault.Invalid, "Validation failed: %s", shapeProblem(err))
	}
	sess := c.h.Session()
	if p.Options.Summarize {
		if b := s.srv.Breakers().Provider(sess.Model().Provider); b.State() == health.StateOpen {
			return nil, fault.Errorf(fault.Failed, "%s for provider %s; retry later", health.ProviderOpenText, sess.Model().Provider)
		}
	}
	res, err := sess.NavigateTree(ctx, p.TargetID, session.NavigateOptions{
		Summarize: p.Options.Summarize, CustomInstructions: p.Options.CustomInstructions,
		ReplaceInstructions: p.Options.ReplaceInstructions, Label: p.Options.Label,
	})
	if err != nil {
		return nil, err
	}
	out := struct {
		EditorText *string `json:"editorText,omitempty"`
		Cancelled  bool    `json:"cancelled"`
		Aborted    bool    `json:"aborted,omitempty"`
	}{Cancelled: res.Cancelled, Aborted: res.Aborted}
	if res.HasEditorText {
		out.EditorText = &res.EditorText
	}
	return out, nil
}

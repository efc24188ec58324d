package piserver

import (
	"context"
	"errors"
	"fmt"
	"github.com/agentd-dev/agentd/internal/fault"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/agentd-dev/agentd/internal/health"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/picommand"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// ---- session commands ----

// pi runs a session command through the shared pi command layer
// (package picommand): the frame was checked against pi-server's schema
// when it arrived, so the layer's own checks (pi's RPC wording) are not
// run again.
func (s *Server) pi(ctx context.Context, c *call) (any, error) {
	cmd, ok := picommand.Lookup(c.cmd.Type)
	if !ok {
		return nil, fault.Errorf(fault.Internal, "no shared pi command %s", c.cmd.Type)
	}
	return cmd.Run(ctx, s.env(c), c.cmd.Type, &c.p.Fields)
}

// env is what the shared pi commands run against: the call's session.
// pi-server keeps no settings of pi's.
func (s *Server) env(c *call) picommand.Env {
	return picommand.Env{Session: c.h.Session(), Models: s.opt.Models, Logger: s.srv.Logger(), Export: c.h.ExportHTML}
}

func (s *Server) prompt(ctx context.Context, c *call) (any, error) {
	if out, ok, err := s.builtin(ctx, c); ok {
		return out, err
	}
	m, err := userMessage(c.p)
	if err != nil {
		return nil, err
	}
	sess := c.h.Session()
	if b := s.srv.Breakers().Provider(sess.Model().Provider); b.State() == health.StateOpen {
		return nil, fault.Errorf(fault.Failed, "%s for provider %s; retry later", health.ProviderOpenText, sess.Model().Provider)
	}
	b, err := picommand.Behavior(c.p.StreamingBehavior) // the schema allowed only these
	if err != nil {
		return nil, err
	}
	if b != session.BehaviorNone {
		// Queued behind the run in progress, or run now: answered at once.
		return nil, sess.PromptThen(m, b, nil)
	}
	if err := sess.PromptThen(m, session.BehaviorNone, nil); err != nil {
		return nil, err
	}
	// The prompt holds its lane until the run ends, as pi-server's does:
	// command_finished tells clients the answer is complete, and dependsOn
	// on a prompt waits for its whole run.
	if err := sess.Wait(ctx); err != nil {
		sess.Abort()
		return nil, err
	}
	return map[string]any{"outcome": sess.LastOutcome()}, nil
}

func userMessage(p params) (*llm.Message, error) {
	if err := checkImages(p); err != nil {
		return nil, err
	}
	return session.UserMessage(*p.Message, p.Images), nil
}

// checkImages checks what the schema cannot: that each image has its
// data and type (pi-server's message; pi's RPC mode words it its own way).
func checkImages(p params) error {
	for i, img := range p.Images {
		if img.Type != llm.ContentImage || img.Data == "" || img.MimeType == "" {
			return fault.Errorf(fault.Invalid, "Validation failed: images[%d]: must be {type: \"image\", data, mimeType}", i)
		}
	}
	return nil
}

func (s *Server) steer(ctx context.Context, c *call) (any, error) {
	if out, ok, err := s.builtin(ctx, c); ok {
		return out, err
	}
	if err := checkImages(c.p); err != nil {
		return nil, err
	}
	return s.pi(ctx, c)
}

func (s *Server) getState(_ context.Context, c *call) (any, error) { return s.info(c.h), nil }

// setModel answers {"model": ...}, where pi's RPC mode answers the model.
func (s *Server) setModel(_ context.Context, c *call) (any, error) {
	m, err := picommand.SetModel(s.env(c), c.p.Provider, c.p.ModelID)
	if err != nil {
		return nil, err
	}
	return map[string]any{"model": m}, nil
}

// cycleModel takes pi-server's direction; pi's RPC mode cycles forward.
func (s *Server) cycleModel(_ context.Context, c *call) (any, error) {
	return picommand.CycleModel(s.env(c), c.p.Direction == "backward")
}

func (s *Server) setThinking(_ context.Context, c *call) (any, error) {
	level := c.p.Level
	if level == "none" {
		level = string(llm.ThinkingOff)
	}
	l, err := llm.ParseThinkingLevel(level)
	if err != nil {
		return nil, fault.Errorf(fault.Invalid, "Validation failed: level: %v", err)
	}
	return nil, picommand.SetThinking(s.env(c), l)
}

// setName checks the name with pi-server's messages (and refuses control
// characters, which pi allows) before the layer sets it.
func (s *Server) setName(ctx context.Context, c *call) (any, error) {
	name := strings.TrimSpace(*c.p.Name)
	if name == "" {
		return nil, fault.Errorf(fault.Invalid, "Validation failed: name: must not be empty")
	}
	if strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return nil, fault.Errorf(fault.Invalid, "Validation failed: name: must not contain control characters")
	}
	return s.pi(ctx, c)
}

func (s *Server) compact(ctx context.Context, c *call) (any, error) {
	sess := c.h.Session()
	if b := s.srv.Breakers().Provider(sess.Model().Provider); b.State() == health.StateOpen {
		return nil, fault.Errorf(fault.Failed, "%s for provider %s; retry later", health.ProviderOpenText, sess.Model().Provider)
	}
	return s.pi(ctx, c)
}

func (s *Server) abortCompaction(_ context.Context, c *call) (any, error) {
	c.h.Session().AbortCompaction()
	return nil, nil
}

type bashResult struct {
	ExitCode       int    `json:"exitCode"`
	Output         string `json:"output"`
	Cancelled      bool   `json:"cancelled"`
	Truncated      bool   `json:"truncated,omitempty"`
	FullOutputPath string `json:"fullOutputPath,omitempty"`
}

func (s *Server) bash(ctx context.Context, c *call) (any, error) {
	report, err := s.srv.Breakers().Bash().Allow()
	if err != nil {
		return nil, fault.Errorf(fault.Failed, "%s; retry later", health.BashOpenText)
	}
	m, err := c.h.Session().Bash(ctx, *c.p.Command, c.p.ExcludeFromContext)
	switch {
	case errors.Is(context.Cause(ctx), pipeline.ErrTimeout):
		report(health.ErrBashTimeout)
	case err != nil && !errors.Is(err, session.ErrBashRunning) && ctx.Err() == nil:
		report(err)
	default:
		report(nil)
	}
	if err != nil {
		return nil, err
	}
	r := bashResult{Output: m.Output, Cancelled: m.Cancelled, Truncated: m.Truncated, FullOutputPath: m.FullOutputPath}
	if m.ExitCode != nil {
		r.ExitCode = *m.ExitCode
	}
	return r, nil
}

func (s *Server) switchFile(_ context.Context, c *call) (any, error) {
	if err := s.srv.SwitchFile(c.h, c.p.SessionPath); err != nil {
		return nil, err
	}
	return map[string]bool{"cancelled": false}, nil
}

func (s *Server) contextUsage(_ context.Context, c *call) (any, error) {
	st := c.h.Session().Stats()
	if st.ContextWindow <= 0 {
		return null, nil
	}
	type usage struct {
		Tokens        *int64   `json:"tokens"`
		ContextWindow int64    `json:"contextWindow"`
		Percent       *float64 `json:"percent"`
	}
	u := usage{ContextWindow: st.ContextWindow}
	if !st.ContextUnknown {
		u.Tokens, u.Percent = &st.ContextTokens, &st.ContextPercent
	}
	return u, nil
}

func (s *Server) tools(_ context.Context, c *call) (any, error) {
	type t struct {
		Name        string `json:"name"`
		Description string `json:"description"`
	}
	out := []t{}
	for _, tl := range c.h.Session().Agent().Config().Tools {
		sp := tl.Spec()
		out = append(out, t{sp.Name, sp.Description})
	}
	// A tool source that gives none (an MCP server that failed to start)
	// is listed with its cause, so a person sees what is missing.
	return map[string]any{"tools": out, "unavailable": c.h.Session().UnavailableTools()}, nil
}

func (s *Server) sessionFiles(_ context.Context, c *call) (any, error) {
	type file struct {
		Path       string `json:"path"`
		Name       string `json:"name"`
		ModifiedAt string `json:"modifiedAt"`
	}
	out := []file{}
	if dir := s.srv.SessionsDir(); dir != "" {
		infos, err := transcript.List(transcript.SessionDir(dir, c.h.Cwd()))
		if err != nil {
			return nil, fmt.Errorf("listing session files: %w", err)
		}
		for _, in := range infos {
			out = append(out, file{in.Path, filepath.Base(in.Path), in.Modified.UTC().Format("2006-01-02T15:04:05.000Z")})
		}
	}
	return map[string]any{"files": out}, nil
}

func (s *Server) uiResponse(_ context.Context, c *call) (any, error) {
	rid := c.p.RequestID
	if !idChars(rid, true) {
		return nil, fault.Errorf(fault.Invalid, "Validation failed: requestId: must match ^[a-zA-Z0-9:_.-]+$")
	}
	a := c.p.Response
	if a == nil {
		return nil, fault.Errorf(fault.Invalid, "Validation failed: response: is required")
	}
	var ans piwire.Answer
	switch a.Method {
	case "cancelled":
		ans.Cancelled = true
	case "select", "input", "editor":
		if a.Value == nil {
			return nil, fault.Errorf(fault.Invalid, "Validation failed: response.value: is required for %s", a.Method)
		}
		ans.Value = a.Value
	case "confirm":
		if a.Confirmed == nil {
			return nil, fault.Errorf(fault.Invalid, "Validation failed: response.confirmed: is required for confirm")
		}
		ans.Confirmed = a.Confirmed
	case "interview":
		if a.Responses == nil {
			return nil, fault.Errorf(fault.Invalid, "Validation failed: response.responses: is required for interview")
		}
		ans.Responses = a.Responses
	default:
		return nil, fault.Errorf(fault.Invalid, "Validation failed: response.method: must be one of select, confirm, input, editor, interview, cancelled")
	}
	req, ok := c.h.Session().InteractionByID(rid)
	if !ok {
		// Not pending: answered, timed out or never asked. Answering a
		// settled request changes nothing and says which it is.
		if err := c.h.Session().Answer(rid, interaction.Response{Cancelled: true}); errors.Is(err, interaction.ErrAlreadyResolved) {
			return nil, fault.Errorf(fault.Invalid, "Request %s already settled", rid)
		}
		return nil, fault.Errorf(fault.Invalid, "No pending UI request with id %s", rid)
	}
	resp, err := ans.Response(req)
	if err != nil {
		return nil, fault.Errorf(fault.Invalid, "Validation failed: response: %v", err)
	}
	if err := c.h.Session().Answer(rid, resp); err != nil {
		if errors.Is(err, interaction.ErrAlreadyResolved) || errors.Is(err, interaction.ErrNotFound) {
			return nil, fault.Errorf(fault.Invalid, "Request %s already settled", rid)
		}
		return nil, fault.Errorf(fault.Invalid, "Validation failed: response: %v", err)
	}
	return nil, nil
}

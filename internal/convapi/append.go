package convapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
)

func (s *Server) appendMessage(w http.ResponseWriter, r *http.Request, p params) error {
	var branch string
	var tools []string
	return s.answerCommand(w, r, p, commandRequest{name: "rest.append", rate: server.RateData, body: true, empty: "No JSON data provided",
		decode: func(o object) (any, string, error) {
			in, b, t, err := decodeAppend(o)
			branch, tools = b, t
			return in, "", err
		},
		check: func(h *server.Hosted, _ *attachment) error {
			if err := checkBranch(branch); err != nil {
				return err
			}
			return checkTools(h.Session(), tools)
		}})
}

// decodeAppend reads the body of POST .../{id}: the message, the branch
// and the tools named.
func decodeAppend(o object) (inputPayload, string, []string, error) {
	if !o.present("role") || !o.present("content") {
		return inputPayload{}, "", nil, fault.New(fault.Invalid, "Missing required fields (role, content)")
	}
	if _, _, err := o.str("content"); err != nil {
		return inputPayload{}, "", nil, err
	}
	in, err := inputOf(o, false)
	if err != nil {
		return in, "", nil, err
	}
	branch, err := branchOf(o)
	if err != nil {
		return in, "", nil, err
	}
	tools, _, err := o.strings("tools")
	return in, branch, tools, err
}

// branchOf reads a branch name with gptme's rule (one safe path
// component; at most 249 bytes, room for ".jsonl"). agentd names one
// branch, main: another valid name is "not found" once the conversation
// is known to exist (see checkBranch).
func branchOf(o object) (string, error) {
	if !o.present("branch") {
		return "main", nil
	}
	b, _, err := o.str("branch")
	switch {
	case err != nil, b == "":
		return "", fault.New(fault.Invalid, "Invalid branch name")
	case len(b) > maxIDBytes-len(".jsonl"):
		return "", fault.New(fault.Invalid, "branch name too long")
	case strings.Contains(b, "..") || strings.ContainsAny(b, "/\\\x00"):
		return "", fault.New(fault.Invalid, "Invalid branch name")
	}
	return b, nil
}

// checkBranch answers a branch other than main.
func checkBranch(b string) error {
	if b != "main" {
		return fault.New(fault.NotFound, "Branch not found: "+clip(b, 100))
	}
	return nil
}

// checkTools refuses a tool name the conversation does not have.
func checkTools(sess *session.Session, names []string) error {
	avail := sess.AvailableTools()
	for _, n := range names {
		if !slices.Contains(avail, n) {
			return fault.New(fault.Invalid, fmt.Sprintf("Tool '%s' not found (this conversation's tools: %s)", clip(n, 100), strings.Join(avail, ", ")))
		}
	}
	return nil
}

func (s *Server) runAppend(ctx context.Context, c *call) (any, error) {
	var in inputPayload
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	if out, ok, err := runBuiltin(ctx, c.h.Session(), in); ok {
		return out, err
	}
	m, err := in.messageIn(c.h)
	if err != nil {
		return nil, err
	}
	if err := c.h.Session().Append(m); err != nil {
		if fault.CodeOf(err) == fault.Busy {
			return nil, fault.New(fault.Conflict, "Cannot add message while generation is in progress")
		}
		return nil, err
	}
	return StatusResponse{Status: "ok"}, nil
}

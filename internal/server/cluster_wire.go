package server

import (
	"encoding/json"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/pipeline"
)

// The cluster's own form of the pipeline's values in the messages nodes
// send each other (envelope, reply, notice). The field names are those
// these messages have had since the cluster first sent them (when they
// were the pipeline's own tags), so nodes of either version read each
// other; TestClusterWireFormat pins them. No face's wire uses them.

// clusterCommand is a pipeline.Command between nodes: all of it but what
// stays on the client's node (Origin, Sender, Announced, Admit).
type clusterCommand struct {
	Type             string          `json:"type"`
	ID               string          `json:"id,omitempty"`
	SessionID        string          `json:"sessionId,omitempty"`
	DependsOn        []string        `json:"dependsOn,omitempty"`
	IfSessionVersion *int            `json:"ifSessionVersion,omitempty"`
	IdempotencyKey   string          `json:"idempotencyKey,omitempty"`
	Payload          json.RawMessage `json:"payload,omitempty"`
}

func toClusterCommand(c pipeline.Command) clusterCommand {
	return clusterCommand{Type: c.Type, ID: c.ID, SessionID: c.SessionID, DependsOn: c.DependsOn,
		IfSessionVersion: c.IfSessionVersion, IdempotencyKey: c.IdempotencyKey, Payload: c.Payload}
}

func (c clusterCommand) command() pipeline.Command {
	return pipeline.Command{Type: c.Type, ID: c.ID, SessionID: c.SessionID, DependsOn: c.DependsOn,
		IfSessionVersion: c.IfSessionVersion, IdempotencyKey: c.IdempotencyKey, Payload: c.Payload}
}

// clusterResponse is a pipeline.Response between nodes.
type clusterResponse struct {
	ID             string          `json:"id,omitempty"`
	Command        string          `json:"command"`
	Success        bool            `json:"success"`
	Data           json.RawMessage `json:"data,omitempty"`
	Err            *fault.Error    `json:"error,omitempty"`
	SessionVersion *int            `json:"sessionVersion,omitempty"`
	Replayed       bool            `json:"replayed,omitempty"`
	TimedOut       bool            `json:"timedOut,omitempty"`
	DataDropped    bool            `json:"dataDropped,omitempty"`
}

func toClusterResponse(r pipeline.Response) clusterResponse { return clusterResponse(r) }

func (r clusterResponse) response() pipeline.Response { return pipeline.Response(r) }

// clusterEvent is a pipeline.Event between nodes: all of it but Origin
// and Announced, which are the sending node's.
type clusterEvent struct {
	Type             pipeline.EventType `json:"type"`
	CommandID        string             `json:"commandId,omitempty"`
	Command          string             `json:"command"`
	SessionID        string             `json:"sessionId,omitempty"`
	DependsOn        []string           `json:"dependsOn"`
	IfSessionVersion *int               `json:"ifSessionVersion,omitempty"`
	IdempotencyKey   string             `json:"idempotencyKey,omitempty"`
	Lane             string             `json:"lane"`
	Success          bool               `json:"success,omitempty"`
	Err              *fault.Error       `json:"error,omitempty"`
	Replayed         bool               `json:"replayed,omitempty"`
	TimedOut         bool               `json:"timedOut,omitempty"`
	SessionVersion   *int               `json:"sessionVersion,omitempty"`
}

func toClusterEvent(e pipeline.Event) *clusterEvent {
	return &clusterEvent{Type: e.Type, CommandID: e.CommandID, Command: e.Command, SessionID: e.SessionID,
		DependsOn: e.DependsOn, IfSessionVersion: e.IfSessionVersion, IdempotencyKey: e.IdempotencyKey, Lane: e.Lane,
		Success: e.Success, Err: e.Err, Replayed: e.Replayed, TimedOut: e.TimedOut, SessionVersion: e.SessionVersion}
}

func (e *clusterEvent) event() pipeline.Event {
	return pipeline.Event{Type: e.Type, CommandID: e.CommandID, Command: e.Command, SessionID: e.SessionID,
		DependsOn: e.DependsOn, IfSessionVersion: e.IfSessionVersion, IdempotencyKey: e.IdempotencyKey, Lane: e.Lane,
		Success: e.Success, Err: e.Err, Replayed: e.Replayed, TimedOut: e.TimedOut, SessionVersion: e.SessionVersion}
}

package acp

import (
	"errors"

	"github.com/agentd-dev/agentd/internal/fault"
)

// fromRemote is an error of the agentd serve a bridged session lives on,
// as the editor is told it: what that server answered (its own faults,
// already in words for a client) and what became of the connection to
// it (the server ended it, a command could not be sent) are the editor's
// to know, so they are relayed as a Failed fault with their text. A fault
// or a JSON-RPC *Error stays as it is. The bridge's own failures do not
// come this way: they reach rpcError as they are, and are logged.
func fromRemote(err error) error {
	if err == nil || fault.As(err) != nil {
		return err
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return fault.Wrap(fault.Failed, err, err.Error())
}

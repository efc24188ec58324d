package convapi

import (
	"net/http"

	"github.com/agentd-dev/agentd/internal/server"
)

// commandRequest says how an HTTP request becomes one of the face's
// pipeline commands. Every route that changes a conversation takes the
// same steps, in gptme's order, so that a request is refused for the same
// reason whichever route it came by: read the JSON body, decode it into
// the command's payload (400), find the attachment it names and the
// conversation (404), check the payload against the conversation, and
// submit. (*Server).command takes them, once for every route.
type commandRequest struct {
	// name is the pipeline command ("rest.<what>").
	name string
	rate server.RateClass
	// body: the route takes a JSON object. empty is the refusal of an
	// empty body; "" reads one as {}.
	body  bool
	empty string
	// decode reads the body (nil for a route without one) into the
	// command's payload (nil for none), and the attachment it names (""
	// for none). A payload that check may change is a pointer.
	decode func(o object) (payload any, sid string, err error)
	// creates: the command makes the conversation when it does not exist
	// (its run checks the principal may see one that does), so it is not
	// looked up here.
	creates bool
	// check, when set, refuses a payload the conversation cannot take
	// (a branch or tool it does not have), and may complete it from the
	// attachment at (nil for none).
	check func(h *server.Hosted, at *attachment) error
}

// command takes a commandRequest's steps and returns the command's
// outcome and the conversation (nil when the command creates it).
func (s *Server) command(w http.ResponseWriter, r *http.Request, p params, c commandRequest) (submitted, *server.Hosted, error) {
	var o object
	if c.body {
		var err error
		if o, err = s.body(w, r, c.empty); err != nil {
			return submitted{}, nil, err
		}
	}
	var payload any
	var sid string
	if c.decode != nil {
		var err error
		if payload, sid, err = c.decode(o); err != nil {
			return submitted{}, nil, err
		}
	}
	var h *server.Hosted
	var at *attachment
	if !c.creates {
		var err error
		if at, err = s.attachmentOf(r.Context(), p.conv, sid); err != nil {
			return submitted{}, nil, err
		}
		if h, err = s.conversation(r.Context(), p.conv); err != nil {
			return submitted{}, nil, err
		}
		if c.check != nil {
			if err := c.check(h, at); err != nil {
				return submitted{}, nil, err
			}
		}
	}
	sub, err := s.submit(r, c.name, p.conv, payload, c.rate)
	return sub, h, err
}

// answerCommand is command for a route that answers with the command's
// outcome as it is.
func (s *Server) answerCommand(w http.ResponseWriter, r *http.Request, p params, c commandRequest) error {
	sub, _, err := s.command(w, r, p, c)
	if err != nil {
		return err
	}
	writeRaw(w, http.StatusOK, sub.data)
	return nil
}

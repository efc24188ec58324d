package health

import (
	"context"

	"github.com/agentd-dev/agentd/internal/llm"
)

// StreamFunc starts a model stream; it has the shape of agent.StreamFunc.
type StreamFunc func(ctx context.Context, m *llm.Model, c *llm.Context, o *llm.StreamOptions) *llm.Stream

// Guard puts every model request made through next behind the breaker of
// the model's provider: a request the breaker refuses ends at once with
// the breaker's error (no connection is made), and the outcome of every
// stream that starts is reported when it ends.
func (bs *Breakers) Guard(next StreamFunc) StreamFunc {
	return func(ctx context.Context, m *llm.Model, c *llm.Context, o *llm.StreamOptions) *llm.Stream {
		report, err := bs.Provider(m.Provider).Allow()
		if err != nil {
			return llm.NewStream(ctx, m, refused{err}, 0)
		}
		s := next(ctx, m, c, o)
		s.OnEnd(func(e *llm.Error) {
			if e == nil {
				report(nil)
				return
			}
			report(e)
		})
		return s
	}
}

// refused is the decoder of a stream the breaker turned away.
type refused struct{ err error }

func (r refused) Open(context.Context) error {
	return &llm.Error{Kind: llm.ErrOverloaded, Message: r.err.Error(), Err: r.err}
}
func (refused) Next(*llm.Builder) error { return nil }
func (refused) Close() error            { return nil }

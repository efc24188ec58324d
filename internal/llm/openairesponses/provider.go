// Package openairesponses streams assistant messages from the OpenAI
// Responses API (POST /v1/responses, api "openai-responses") and from
// OpenAI-compatible servers that implement it (vLLM, Ollama, OpenRouter).
//
// The request is agentd's own (request.go, body.go, sent with
// llm.PostJSON), not the OpenAI SDK's, which linked about a quarter of the
// binary's symbols and most of its package-init memory for one POST. The
// event stream is split by llm.SSEReader and decoded here into only the
// fields mapped to llm.Builder calls; the SDK's typed union cost about
// forty allocations and 13 KB per event.
package openairesponses

import (
	"context"
	"net/http"

	"github.com/agentd-dev/agentd/internal/llm"
)

// DefaultBaseURL is used when a model has no base URL.
const DefaultBaseURL = "https://api.openai.com/v1"

// maxErrorBody bounds how much of an HTTP error answer is read.
const maxErrorBody = 1 << 20

// Provider streams from the Responses endpoint under each model's base
// URL. It holds no per-request state and is safe for concurrent use.
type Provider struct {
	hc *http.Client
}

var _ llm.Provider = (*Provider)(nil)

// New returns a provider that sends requests with httpClient. A nil client
// means a fresh client with no overall timeout: streams may legitimately
// run for many minutes, and stalls are caught by the idle timeout instead.
func New(httpClient *http.Client) *Provider {
	if httpClient == nil {
		httpClient = &http.Client{}
	}
	// Nothing is read from the environment, and the request is sent once:
	// the engine decides about retrying, with the error's classification
	// and Retry-After.
	return &Provider{hc: httpClient}
}

// Stream implements llm.Provider. Everything sent comes from m and o: an
// empty o.APIKey sends no Authorization header (local servers), never a
// key from the environment.
func (p *Provider) Stream(ctx context.Context, m *llm.Model, c *llm.Context, o *llm.StreamOptions) *llm.Stream {
	if o == nil {
		o = &llm.StreamOptions{}
	}
	if c == nil {
		c = &llm.Context{}
	}
	d := &decoder{hc: p.hc, base: m.BaseURL, header: llm.BearerHeader(m, o)}
	if d.base == "" {
		d.base = DefaultBaseURL
	}
	params, err := buildParams(m, c, o)
	if err != nil {
		d.openErr = &llm.Error{Kind: llm.ErrBadRequest, Message: "openai-responses: " + err.Error(), Err: err}
	}
	d.params = params
	return llm.NewStream(ctx, m, d, o.IdleTimeout)
}

// Package anthropic streams assistant messages from the Anthropic Messages
// API (POST <baseUrl>/v1/messages): it builds the request body (body.go,
// request.go), sends it with llm.PostJSON, splits the answer with
// llm.SSEReader and maps the events onto llm's stream builder. (The
// official SDK did the first and the second until it was found to be about
// a sixth of the binary's symbols for this one request.)
//
// Nothing depends on the environment: the base URL is the model's, the key
// is the request's (none is sent when it is empty), and the request is
// sent once. Retry and circuit breaking belong to the caller, which sees
// every failure as an *llm.Error.
package anthropic

import (
	"context"
	"net/http"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
)

// DefaultBaseURL is used when a model names no base URL.
const DefaultBaseURL = "https://api.anthropic.com/"

// apiVersion is the Messages API version agentd speaks.
const apiVersion = "2023-06-01"

// oauthBeta is the beta flag the API requires for requests authenticated
// with a Claude subscription's OAuth token instead of an API key.
const oauthBeta = "oauth-2025-04-20"

// Provider speaks the Anthropic Messages API. It is safe for concurrent
// use.
type Provider struct {
	hc *http.Client
}

// New returns a provider that sends its requests with hc; nil uses
// http.DefaultClient.
func New(hc *http.Client) *Provider {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Provider{hc: hc}
}

// Stream sends one request and streams the answer.
func (p *Provider) Stream(ctx context.Context, m *llm.Model, c *llm.Context, o *llm.StreamOptions) *llm.Stream {
	if o == nil {
		o = &llm.StreamOptions{}
	}
	if c == nil {
		c = &llm.Context{}
	}
	return llm.NewStream(ctx, m, &decoder{p: p, m: m, c: c, o: o}, o.IdleTimeout)
}

// requestHeader is what the request says besides its body: the API
// version, how to authenticate (an API key as x-api-key, an OAuth token
// as a bearer token, nothing for an empty key), and the model's and the
// caller's headers, the caller's winning; they may replace any of the
// others. An OAuth token adds its beta flag to any the headers name.
func requestHeader(m *llm.Model, o *llm.StreamOptions) http.Header {
	h := make(http.Header, len(m.Headers)+len(o.Headers)+4)
	h.Set("Accept", "application/json")
	h.Set("Anthropic-Version", apiVersion)
	switch {
	case o.APIKey == "":
	case IsOAuthToken(o.APIKey):
		h.Set("Authorization", "Bearer "+o.APIKey)
	default:
		h.Set("X-Api-Key", o.APIKey)
	}
	for k, v := range m.Headers {
		h.Set(k, v)
	}
	for k, v := range o.Headers {
		h.Set(k, v)
	}
	if IsOAuthToken(o.APIKey) {
		switch beta := h.Get("Anthropic-Beta"); {
		case beta == "":
			h.Set("Anthropic-Beta", oauthBeta)
		case !strings.Contains(beta, oauthBeta):
			h.Set("Anthropic-Beta", beta+","+oauthBeta)
		}
	}
	return h
}

// IsOAuthToken reports whether key is a Claude OAuth access token
// (sk-ant-oat…), which is sent as a bearer token rather than x-api-key.
func IsOAuthToken(key string) bool { return strings.HasPrefix(key, "sk-ant-oat") }

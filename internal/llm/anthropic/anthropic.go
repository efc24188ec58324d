// Package anthropic streams assistant messages from the Anthropic Messages
// API (POST <baseUrl>/v1/messages) with the official Go SDK: the SDK
// builds and sends the request and splits the answer into server-sent
// events; this package maps the events onto llm's stream builder.
//
// The SDK is used without any of its defaults that depend on the
// environment: the base URL is the model's, the key is the request's (none
// is sent when it is empty), and the SDK never retries. Retry and circuit
// breaking belong to the caller, which sees every failure as an *llm.Error.
package anthropic

import (
	"context"
	"net/http"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/agentd-dev/agentd/internal/llm"
)

// oauthBeta is the beta flag the API requires for requests authenticated
// with a Claude subscription's OAuth token instead of an API key.
const oauthBeta = "oauth-2025-04-20"

// Provider speaks the Anthropic Messages API. It is safe for concurrent
// use.
type Provider struct {
	client sdk.Client
}

// New returns a provider that sends its requests with hc; nil uses
// http.DefaultClient.
func New(hc *http.Client) *Provider {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Provider{client: sdk.NewClient(
		option.WithoutEnvironmentDefaults(),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
	)}
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

// requestOptions are the per-request SDK options: where to send it, how
// to authenticate, and the model's and the caller's headers, the caller's
// winning. An OAuth token adds its beta flag to any the headers name.
func requestOptions(m *llm.Model, o *llm.StreamOptions) []option.RequestOption {
	h := make(http.Header, len(m.Headers)+len(o.Headers)+1)
	for k, v := range m.Headers {
		h.Set(k, v)
	}
	for k, v := range o.Headers {
		h.Set(k, v)
	}
	opts := make([]option.RequestOption, 0, 2+len(h))
	if m.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(m.BaseURL))
	}
	switch {
	case o.APIKey == "":
	case IsOAuthToken(o.APIKey):
		opts = append(opts, option.WithAuthToken(o.APIKey))
		switch beta := h.Get("Anthropic-Beta"); {
		case beta == "":
			h.Set("Anthropic-Beta", oauthBeta)
		case !strings.Contains(beta, oauthBeta):
			h.Set("Anthropic-Beta", beta+","+oauthBeta)
		}
	default:
		opts = append(opts, option.WithAPIKey(o.APIKey))
	}
	for k, v := range h {
		opts = append(opts, option.WithHeader(k, v[0]))
	}
	return opts
}

// IsOAuthToken reports whether key is a Claude OAuth access token
// (sk-ant-oat…), which is sent as a bearer token rather than x-api-key.
func IsOAuthToken(key string) bool { return strings.HasPrefix(key, "sk-ant-oat") }

// Package openairesponses streams assistant messages from the OpenAI
// Responses API (POST /v1/responses, api "openai-responses") and from
// OpenAI-compatible servers that implement it (vLLM, Ollama, OpenRouter).
//
// Requests are built and sent with the official SDK
// (github.com/openai/openai-go/v3). The event stream itself is decoded
// here rather than through the SDK's typed union, which costs about forty
// allocations and 13 KB per event; the decoder reads only the fields it
// maps to llm.Builder calls.
package openairesponses

import (
	"bytes"
	"context"
	"io"
	"net/http"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/agentd-dev/agentd/internal/llm"
)

// DefaultBaseURL is used when a model has no base URL.
const DefaultBaseURL = "https://api.openai.com/v1"

// maxErrorBody bounds how much of an HTTP error answer is read.
const maxErrorBody = 1 << 20

// Provider streams from the Responses endpoint under each model's base
// URL. It holds no per-request state and is safe for concurrent use.
type Provider struct {
	svc responses.ResponseService
}

var _ llm.Provider = (*Provider)(nil)

// New returns a provider that sends requests with httpClient. A nil client
// means a fresh client with no overall timeout: streams may legitimately
// run for many minutes, and stalls are caught by the idle timeout instead.
func New(httpClient *http.Client) *Provider {
	if httpClient == nil {
		httpClient = &http.Client{}
	}
	// The service is built without option defaults: openai.NewClient would
	// read OPENAI_* environment variables, and production code never
	// consults the environment. Retries are off because the engine decides
	// about retrying, with the error's classification and Retry-After.
	return &Provider{
		svc: responses.NewResponseService(option.WithHTTPClient(httpClient), option.WithMaxRetries(0)),
	}
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
	d := &decoder{svc: &p.svc}
	params, err := buildParams(m, c, o)
	if err != nil {
		d.openErr = &llm.Error{Kind: llm.ErrBadRequest, Message: "openai-responses: " + err.Error(), Err: err}
	}
	d.params = params
	d.opts = p.requestOptions(m, o, d)
	return llm.NewStream(ctx, m, d, o.IdleTimeout)
}

// requestOptions sets the per-request half of what the SDK would
// otherwise default (base URL, key, headers); the client and "no retries"
// are set on the service in New.
func (p *Provider) requestOptions(m *llm.Model, o *llm.StreamOptions, d *decoder) []option.RequestOption {
	baseURL := m.BaseURL
	if baseURL == "" {
		baseURL = DefaultBaseURL
	}
	opts := make([]option.RequestOption, 0, 4+len(m.Headers)+len(o.Headers))
	opts = append(opts,
		option.WithBaseURL(baseURL),
		option.WithResponseInto(&d.resp),
		option.WithMiddleware(d.keepErrorBody),
	)
	if o.APIKey != "" {
		opts = append(opts, option.WithAPIKey(o.APIKey))
	}
	for k, v := range m.Headers {
		opts = append(opts, option.WithHeader(k, v))
	}
	for k, v := range o.Headers {
		opts = append(opts, option.WithHeader(k, v))
	}
	return opts
}

// keepErrorBody saves the body of an HTTP error answer. The SDK only keeps
// what it can parse as {"error":{...}}, and OpenAI-compatible servers
// answer in other shapes ({"error":"..."}, {"detail":...}, plain text).
func (d *decoder) keepErrorBody(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if err != nil || res == nil || res.StatusCode < http.StatusBadRequest || res.Body == nil {
		return res, err
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	_ = res.Body.Close()
	d.errBody = body
	res.Body = io.NopCloser(bytes.NewReader(body))
	return res, nil
}

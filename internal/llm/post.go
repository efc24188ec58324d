package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// userAgent names agentd to the providers. (The SDKs agentd used before
// sent "Anthropic/Go <version>" and "OpenAI/Go <version>" and a set of
// X-Stainless-* headers describing themselves.)
const userAgent = "agentd"

// Endpoint returns the URL of path (relative, such as "v1/messages") under
// base, the way the provider SDKs joined them: a base URL whose path does
// not end in "/" gets one, so "http://h/v1" and "http://h/v1/" both give
// "http://h/v1/chat/completions" for "chat/completions", and a base
// without a path puts the endpoint at the root. A query on the base URL is
// dropped.
func Endpoint(base, path string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("base URL %q: %w", base, err)
	}
	if u.Path != "" && !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	ref, err := url.Parse(path)
	if err != nil {
		return "", err
	}
	return u.ResolveReference(ref).String(), nil
}

// PostJSON sends body, encoded as JSON, to endpoint with header, and
// returns the response whatever its status; the caller reads an error
// answer and closes the body. header is sent as it is, after the defaults
// (JSON content type, agentd's user agent), so it may replace them. ctx
// reaches the request: cancelling it aborts the request and the reading of
// the body. The request is sent once: retrying belongs to the caller,
// which decides with the error's classification and Retry-After.
//
// When sending fails after ctx ended, the error is ctx's, as the SDKs
// reported it, so that an abort is not mistaken for a network failure.
func PostJSON(ctx context.Context, hc *http.Client, endpoint string, header http.Header, body any) (*http.Response, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	for k, v := range header {
		req.Header[k] = v
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return resp, nil
}

// StatusError is the cause kept on an *Error made from an HTTP error
// answer: which request got which status.
func StatusError(resp *http.Response) error {
	u := ""
	if resp.Request != nil && resp.Request.URL != nil {
		u = resp.Request.URL.Redacted()
	}
	return fmt.Errorf("POST %q: %d %s", u, resp.StatusCode, http.StatusText(resp.StatusCode))
}

// StreamRequest is the request a provider opens its stream with. The
// providers differ in the endpoint, the body, how they read an error
// answer and how they word a failure to send; the sending is the same.
type StreamRequest struct {
	Base   string      // the model's base URL (see Endpoint)
	Path   string      // the endpoint under Base, such as "v1/messages"
	Header http.Header // sent as PostJSON sends it
	Body   any         // encoded as JSON

	// AnswerError makes the provider's error of an answer whose status is
	// 400 or more; it reads and closes the answer's body.
	AnswerError func(*http.Response) error

	// ErrPrefix, when set, starts the text of an error building or
	// sending the request ("openai-responses: …"). The error of an ended
	// ctx is returned as it is, for the stream to report an abort.
	ErrPrefix string
}

// Open sends r with hc and returns the response of a request the server
// accepted (status below 400), for the caller to read and close.
func (r *StreamRequest) Open(ctx context.Context, hc *http.Client) (*http.Response, error) {
	endpoint, err := Endpoint(r.Base, r.Path)
	if err != nil {
		return nil, r.wrap(err)
	}
	resp, err := PostJSON(ctx, hc, endpoint, r.Header, r.Body)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, r.wrap(err)
	}
	if resp.StatusCode >= http.StatusBadRequest {
		return nil, r.AnswerError(resp)
	}
	return resp, nil
}

func (r *StreamRequest) wrap(err error) error {
	if r.ErrPrefix == "" {
		return err
	}
	return fmt.Errorf("%s: %w", r.ErrPrefix, err)
}

// BearerHeader is what a request of the OpenAI-style APIs says besides
// its body: the key as a bearer token (none for an empty key: local
// servers), then the model's headers and the caller's, which may replace
// it.
func BearerHeader(m *Model, o *StreamOptions) http.Header {
	h := make(http.Header, 2+len(m.Headers)+len(o.Headers))
	h.Set("Accept", "application/json")
	if o.APIKey != "" {
		h.Set("Authorization", "Bearer "+o.APIKey)
	}
	for k, v := range m.Headers {
		h.Set(k, v)
	}
	for k, v := range o.Headers {
		h.Set(k, v)
	}
	return h
}

// CloseBody closes the response body *body, if one is open, and forgets
// it, so that a decoder's Close may be called more than once.
func CloseBody(body *io.ReadCloser) error {
	if *body == nil {
		return nil
	}
	err := (*body).Close()
	*body = nil
	return err
}

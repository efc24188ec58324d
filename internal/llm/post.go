package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

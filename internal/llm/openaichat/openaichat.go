// Package openaichat streams assistant messages from the OpenAI Chat
// Completions API (POST <baseUrl>/chat/completions, api
// "openai-completions") and from the many servers that imitate it: Ollama,
// vLLM, llama.cpp's server, LM Studio, OpenRouter, DeepSeek and others.
//
// The request is agentd's own (request.go, sent with llm.PostJSON), not the
// OpenAI SDK's: the SDK linked about a quarter of the binary's symbols for
// one POST. Nothing depends on the environment: the base URL is the
// model's, the key is the request's (no Authorization header when it is
// empty, as local servers expect), and the request is sent once. Retry
// belongs to the caller, which sees every failure as an *llm.Error.
//
// The response is split by llm.SSEReader and decoded by a one-pass chunk
// walker (decode.go): a typed ChatCompletionChunk would cost about 50
// allocations and 10µs per chunk, and the fields compatible servers add
// (reasoning_content, reasoning, reasoning_details) are exactly the ones
// such types do not model.
package openaichat

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/valyala/fastjson"

	"github.com/agentd-dev/agentd/internal/llm"
)

// DefaultBaseURL is used when a model names no base URL.
const DefaultBaseURL = "https://api.openai.com/v1"

// maxWholeAnswer bounds a non-streamed answer.
const maxWholeAnswer = 16 << 20

// maxErrorBody bounds how much of an error answer is read: enough for any
// real error message, not enough for a misrouted HTML page to matter.
const maxErrorBody = 64 << 10

// Provider speaks the Chat Completions API. It is safe for concurrent use.
type Provider struct {
	hc *http.Client
}

// New returns a provider that sends its requests with hc; nil uses a
// client without an overall timeout, since a response may stream for many
// minutes (StreamOptions.IdleTimeout bounds stalls instead).
func New(hc *http.Client) *Provider {
	if hc == nil {
		hc = &http.Client{}
	}
	return &Provider{hc: hc}
}

// Stream sends one request and streams the answer. Everything the request
// needs comes from m, c and o; nothing is read from the environment.
func (p *Provider) Stream(ctx context.Context, m *llm.Model, c *llm.Context, o *llm.StreamOptions) *llm.Stream {
	if o == nil {
		o = &llm.StreamOptions{}
	}
	if c == nil {
		c = &llm.Context{}
	}
	return llm.NewStream(ctx, m, &decoder{p: p, m: m, c: c, o: o, cur: -1}, o.IdleTimeout)
}

// Open implements llm.Decoder.
func (d *decoder) Open(ctx context.Context) error {
	params, err := buildParams(d.m, d.c, d.o)
	if err != nil {
		return &llm.Error{Kind: llm.ErrBadRequest, Message: "openai-completions: " + err.Error(), Err: err}
	}
	req := llm.StreamRequest{
		Base:        cmp.Or(d.m.BaseURL, DefaultBaseURL),
		Path:        "chat/completions",
		Header:      llm.BearerHeader(d.m, d.o),
		Body:        params,
		AnswerError: httpError,
	}
	resp, err := req.Open(ctx, d.p.hc)
	if err != nil {
		return err
	}
	d.body = resp.Body
	br := llm.NewBufferedReader(resp.Body)
	if isJSON(resp.Header.Get("Content-Type")) && startsJSONObject(br) {
		// A server that did not stream: an error reported with the wrong
		// status, or a whole completion from one that ignores "stream".
		return d.openWhole(br)
	}
	d.sse = llm.NewSSEReader(br)
	return nil
}

// startsJSONObject reports whether the body is a JSON object rather than
// an event stream sent with the wrong content type.
func startsJSONObject(br *bufio.Reader) bool {
	for {
		c, err := br.ReadByte()
		if err != nil {
			return false
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		_ = br.UnreadByte()
		return c == '{'
	}
}

// openWhole reads a non-streamed answer: an error fails the request, a
// chat.completion is kept for Next to replay.
func (d *decoder) openWhole(r io.Reader) error {
	body, err := io.ReadAll(io.LimitReader(r, maxWholeAnswer))
	if err != nil {
		return fmt.Errorf("openai-completions: reading the answer: %w", err)
	}
	root, err := d.json.ParseBytes(body)
	if err == nil {
		if e := root.Get("error"); e != nil && e.Type() != fastjson.TypeNull {
			msg, typ := errorValue(e)
			return llm.StreamError(typ, msg)
		}
	}
	if err != nil || root.Get("choices") == nil || root.Get("choices").Type() != fastjson.TypeArray {
		return &llm.Error{Kind: llm.ErrStream, Message: "openai-completions: the provider answered with JSON that is neither a completion nor an error"}
	}
	d.whole = body
	return nil
}

// Close implements llm.Decoder.
func (d *decoder) Close() error {
	return llm.CloseBody(&d.body)
}

// httpError turns an HTTP error answer into an *llm.Error whose text is
// "<status> <provider message>". The message comes from the body, whatever
// shape the server used; the request and status (llm.StatusError) are
// kept behind it.
func httpError(resp *http.Response) error {
	var body []byte
	if resp.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		_ = resp.Body.Close()
	}
	msg, typ := errorBody(body)
	return llm.HTTPError(resp.StatusCode, resp.Header, typ, msg, llm.StatusError(resp))
}

// errorBody finds the message and type in an error answer. Besides
// OpenAI's {"error": {"message", "type", "code"}} it reads what compatible
// servers send: {"error": "text"} (Ollama, LM Studio), {"message", "type"}
// at the top level (vLLM), {"detail": "text"} (FastAPI servers), and plain
// text.
func errorBody(body []byte) (msg, typ string) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return "", ""
	}
	var p fastjson.Parser
	root, err := p.ParseBytes(body)
	if err != nil {
		s := string(body)
		if strings.HasPrefix(s, "<") { // an HTML error page from a proxy
			return "", ""
		}
		if len(s) > 300 {
			s = s[:300] + "…"
		}
		return s, ""
	}
	if e := root.Get("error"); e != nil && e.Type() != fastjson.TypeNull {
		if msg, typ = errorValue(e); msg != "" {
			return msg, typ
		}
	}
	if m := root.Get("message"); m != nil && m.Type() == fastjson.TypeString {
		return string(stringOf(m)), text(root.Get("type"))
	}
	if m := root.Get("detail"); m != nil && m.Type() == fastjson.TypeString {
		return string(stringOf(m)), ""
	}
	return "", typ
}

// errorValue reads an "error" value: an object with message, type, code
// and, from OpenRouter, metadata.raw (the upstream provider's own words,
// which pi appends too), or a bare string. The code is preferred as the
// type because OpenAI puts the specific reason there
// (context_length_exceeded, rate_limit_exceeded) under a generic type.
func errorValue(e *fastjson.Value) (msg, typ string) {
	if e.Type() == fastjson.TypeString {
		return string(stringOf(e)), ""
	}
	msg = text(e.Get("message"))
	if c := stringOf(e.Get("code")); len(c) > 0 {
		typ = string(c)
	} else {
		typ = text(e.Get("type"))
	}
	if raw := string(stringOf(e.Get("metadata", "raw"))); raw != "" && raw != msg {
		msg += "\n" + raw
	}
	return msg, typ
}

// text returns a value as text, as it would be shown: a string's own
// text, another value's JSON (a numeric code), nothing for null or absent.
func text(v *fastjson.Value) string {
	if v == nil || v.Type() == fastjson.TypeNull {
		return ""
	}
	if v.Type() == fastjson.TypeString {
		return string(stringOf(v))
	}
	return string(v.MarshalTo(nil))
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

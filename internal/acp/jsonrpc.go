package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/ndjson"
	"github.com/agentd-dev/agentd/internal/piwire"
)

// JSON-RPC 2.0 error codes, and ACP's own.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
	// CodeAuthRequired and CodeResourceNotFound are ACP's.
	CodeAuthRequired     = -32000
	CodeResourceNotFound = -32002
)

// Error is a JSON-RPC error: the one a handler returns to choose the
// code, and the one a call to the client fails with when it answered an
// error.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// invalidParams is the error of params that do not fit the method.
func invalidParams(method, format string, args ...any) *Error {
	return &Error{Code: CodeInvalidParams, Message: "Invalid params for " + method + ": " + fmt.Sprintf(format, args...)}
}

// frame is every JSON-RPC message at once: a request has a method and an
// id, a notification a method and no id, a response an id and a result
// or an error.
type frame struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// outFrame is what we write; Result is always present in a success.
type outFrame struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  any             `json:"params,omitempty"`
	Result  any             `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// nullID is the id of a response to a request whose id could not be read.
var nullID = json.RawMessage("null")

// handler serves one incoming request or notification. A notification's
// result is dropped.
type handler func(ctx context.Context, method string, params json.RawMessage) (any, error)

// conn is one JSON-RPC peer over newline-delimited JSON: requests in
// both directions, each incoming one served on a goroutine of its own so
// a long session/prompt never holds up the session/cancel or the
// permission answer behind it.
type conn struct {
	log     *slog.Logger
	handle  handler
	maxLine int
	out     *ndjson.Writer

	mu      sync.Mutex
	nextID  int64
	pending map[string]chan frame
	closed  bool

	wg sync.WaitGroup
}

func newConn(h handler, maxLine int, log *slog.Logger) *conn {
	return &conn{handle: h, maxLine: maxLine, log: log, pending: map[string]chan frame{}}
}

// serve reads frames from in until it ends or ctx is cancelled. Then
// atEnd runs (it ends what the handlers wait for), the calls waiting for
// the client fail, the handlers still running are cancelled and waited
// for, and everything queued is written.
func (c *conn) serve(ctx context.Context, in io.Reader, w io.Writer, atEnd func()) error {
	c.out = ndjson.New(w)
	defer c.out.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	lines, readErr := piwire.ReadLines(ctx, in, c.maxLine, func() {
		c.reply(nullID, nil, &Error{Code: CodeParseError, Message: fmt.Sprintf("Parse error: line exceeds the maximum size of %d bytes", c.maxLine)})
	})
	var err error
loop:
	for {
		select {
		case line := <-lines:
			c.dispatch(ctx, line)
		case err = <-readErr:
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	// Sessions end before the calls waiting for the client fail: a tool
	// call parked on the client's permission answer must be left parked
	// (asked again on load), not settled as rejected by the failed call.
	atEnd()
	c.shut()
	cancel()
	c.wg.Wait()
	// A handler that was opening a session when the input ended has
	// registered it by now.
	atEnd()
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// shut fails every call waiting for the client's answer.
func (c *conn) shut() {
	c.mu.Lock()
	c.closed = true
	p := c.pending
	c.pending = map[string]chan frame{}
	c.mu.Unlock()
	for _, ch := range p {
		close(ch)
	}
}

// decodeFrame reads one line as a JSON-RPC frame, or says what is wrong
// with it: the code and message of the error to answer, and the id when
// one could be read.
func decodeFrame(line []byte) (frame, *Error) {
	var f frame
	if err := json.Unmarshal(line, &f); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			if te.Field == "" {
				return frame{}, &Error{Code: CodeInvalidRequest, Message: "Invalid request: a message must be a JSON object, not " + te.Value}
			}
			return frame{}, &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("Invalid request: %q must be %s, not %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)}
		}
		return frame{}, &Error{Code: CodeParseError, Message: "Parse error: " + piwire.DescribeJSONError(err)}
	}
	if f.JSONRPC != "2.0" {
		return f, &Error{Code: CodeInvalidRequest, Message: `Invalid request: "jsonrpc" must be "2.0"`}
	}
	if len(f.ID) > 0 && !validID(f.ID) {
		id := f.ID
		f.ID = nil
		return f, &Error{Code: CodeInvalidRequest, Message: "Invalid request: id must be a string, a number or null, not " + string(id)}
	}
	if f.Method == "" && (len(f.ID) == 0 || f.Result == nil && f.Error == nil) {
		return f, &Error{Code: CodeInvalidRequest, Message: `Invalid request: no "method", and not a response`}
	}
	return f, nil
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "ptr", "struct", "map":
		return "an object"
	case "slice":
		return "an array"
	}
	return "a " + k
}

func validID(id json.RawMessage) bool {
	switch id[0] {
	case '"':
		var s string
		return json.Unmarshal(id, &s) == nil
	case 'n':
		return string(id) == "null"
	}
	_, err := strconv.ParseFloat(string(id), 64)
	return err == nil
}

func (c *conn) dispatch(ctx context.Context, line []byte) {
	if len(trimSpace(line)) == 0 {
		return
	}
	f, ferr := decodeFrame(line)
	if ferr != nil {
		id := f.ID
		if id == nil {
			id = nullID
		}
		c.reply(id, nil, ferr)
		return
	}
	if f.Method == "" {
		c.deliver(f)
		return
	}
	notification := len(f.ID) == 0
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		res, err := c.handle(ctx, f.Method, f.Params)
		if notification {
			if err != nil {
				c.log.Warn("acp notification", "method", f.Method, "err", err)
			}
			return
		}
		if ar, ok := res.(afterReply); ok && err == nil {
			c.reply(f.ID, ar.result, nil)
			ar.then()
			return
		}
		c.reply(f.ID, res, c.rpcError(f.Method, err))
	}()
}

// afterReply is a handler's result with what to do once the response is
// queued: what follows must reach the client after it.
type afterReply struct {
	result any
	then   func()
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r' || b[len(b)-1] == '\n') {
		b = b[:len(b)-1]
	}
	return b
}

// rpcCodes is the face's one table from agentd's fault codes to
// JSON-RPC's and ACP's error codes; a fault whose code is not here is
// answered -32603 with its message.
var rpcCodes = map[fault.Code]int{
	fault.Invalid:  CodeInvalidParams,
	fault.NotFound: CodeResourceNotFound,
}

// rpcError is the face's one error path: a handler's *Error as it is, a
// fault by its code (rpcCodes) with its message, and anything else (an
// Internal fault too) logged and answered -32603 "Internal error", so
// that no internal detail (a path, a library's words) reaches the editor.
func (c *conn) rpcError(method string, err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	fe := fault.As(err)
	if fe == nil || fe.Code == fault.Internal {
		c.log.Error("acp request failed", "method", method, "err", err)
		return &Error{Code: CodeInternalError, Message: "Internal error"}
	}
	code, ok := rpcCodes[fe.Code]
	if !ok {
		code = CodeInternalError
	}
	return &Error{Code: code, Message: fe.Message}
}

func (c *conn) reply(id json.RawMessage, result any, e *Error) {
	f := outFrame{JSONRPC: "2.0", ID: id, Error: e}
	if e == nil {
		f.Result = result
		if result == nil {
			f.Result = struct{}{}
		}
	}
	c.write(f)
}

func (c *conn) write(f outFrame) {
	b, err := json.Marshal(f)
	if err != nil {
		c.log.Error("acp: encoding a frame", "method", f.Method, "err", err)
		return
	}
	c.out.Write(b)
}

// notify sends a notification; it never blocks on the client.
func (c *conn) notify(method string, params any) {
	c.write(outFrame{JSONRPC: "2.0", Method: method, Params: params})
}

// errClosed is a call cut short because the connection ended.
var errClosed = errors.New("the client connection ended")

// call sends a request to the client and decodes its result into result.
func (c *conn) call(ctx context.Context, method string, params, result any) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errClosed
	}
	c.nextID++
	id := strconv.FormatInt(c.nextID, 10)
	ch := make(chan frame, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	c.write(outFrame{JSONRPC: "2.0", ID: json.RawMessage(id), Method: method, Params: params})
	select {
	case f, ok := <-ch:
		if !ok {
			return errClosed
		}
		if f.Error != nil {
			return f.Error
		}
		if result != nil {
			if err := json.Unmarshal(f.Result, result); err != nil {
				return fmt.Errorf("the client's answer to %s: %w", method, err)
			}
		}
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return ctx.Err()
	}
}

// deliver hands a response to the call waiting for it.
func (c *conn) deliver(f frame) {
	c.mu.Lock()
	ch, ok := c.pending[string(f.ID)]
	delete(c.pending, string(f.ID))
	c.mu.Unlock()
	if !ok {
		c.log.Warn("acp: a response to no request of ours", "id", string(f.ID))
		return
	}
	ch <- f
}

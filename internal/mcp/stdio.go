package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioTransport runs a server's command and speaks MCP over its stdin
// and stdout, as the SDK's CommandTransport does, but reads stdout
// through jsonLines: the SDK ends the connection at the first line that
// is not a JSON-RPC message, and servers do print other things there (a
// banner, a library's log line, a stray console.log), which took the
// server and all its tools away.
type stdioTransport struct {
	cmd *exec.Cmd
	// terminate is how long Close waits for the command to exit after
	// closing its stdin, and again after SIGTERM, before SIGKILL.
	terminate time.Duration
	// dropped is told each line of stdout that was skipped.
	dropped func(line []byte)
}

// maxLine bounds one line of a server's stdout, as the SDK's own
// DefaultMaxLineLength does; a longer line ends the connection.
const maxLine = sdk.DefaultMaxLineLength

// Connect starts the command.
func (t *stdioTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	r := &jsonLines{r: bufio.NewReaderSize(stdout, 64<<10), max: maxLine, dropped: t.dropped}
	// The connection is closed by closing stdin (see procStdin), never
	// stdout: cmd.Wait closes that once the command exited.
	// jsonLines bounds the line; the SDK's own bound counts what its
	// decoder read ahead too.
	w := &procStdin{cmd: t.cmd, stdin: stdin, terminate: t.terminate}
	return (&sdk.IOTransport{Reader: io.NopCloser(r), Writer: w, MaxLineLength: -1}).Connect(ctx)
}

// procStdin is the command's stdin; closing it ends the command as the
// protocol says: close its input, wait, SIGTERM, wait, SIGKILL.
type procStdin struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	terminate time.Duration
}

func (p *procStdin) Write(b []byte) (int, error) { return p.stdin.Write(b) }

func (p *procStdin) Close() error {
	if err := p.stdin.Close(); err != nil {
		return fmt.Errorf("closing stdin: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	wait := func() (error, bool) {
		t := time.NewTimer(p.terminate)
		defer t.Stop()
		select {
		case err := <-done:
			return err, true
		case <-t.C:
			return nil, false
		}
	}
	if err, ok := wait(); ok {
		return err
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err == nil {
		if err, ok := wait(); ok {
			return err
		}
	}
	if err := p.cmd.Process.Kill(); err != nil {
		return err
	}
	if err, ok := wait(); ok {
		return err
	}
	return errors.New("the command did not exit after SIGKILL")
}

// errLineTooLong is a line of stdout longer than maxLine.
var errLineTooLong = fmt.Errorf("the server wrote a line of more than %d bytes on stdout", maxLine)

// jsonLines passes on the lines of a server's stdout that are JSON-RPC
// messages (or batches of them), each ending in a newline, and tells
// dropped each other non-blank line.
type jsonLines struct {
	r       *bufio.Reader
	max     int
	dropped func(line []byte)

	pending []byte // what is left of the line being passed on
	err     error  // the read error after pending
	line    []byte // reused
}

func (j *jsonLines) Read(p []byte) (int, error) {
	for len(j.pending) == 0 {
		if j.err != nil {
			return 0, j.err
		}
		line, err := j.next()
		j.err = err
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			if isMessage(trimmed) {
				// A last line without its newline gets one: the
				// SDK reads a message up to its newline.
				if line[len(line)-1] != '\n' {
					line = append(line, '\n')
				}
				j.pending = line
			} else if j.dropped != nil {
				j.dropped(trimmed)
			}
		}
	}
	n := copy(p, j.pending)
	j.pending = j.pending[n:]
	return n, nil
}

// next reads one line, its newline included when it had one.
func (j *jsonLines) next() ([]byte, error) {
	j.line = j.line[:0]
	for {
		chunk, err := j.r.ReadSlice('\n')
		if len(j.line)+len(chunk) > j.max {
			return nil, errLineTooLong
		}
		j.line = append(j.line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return j.line, err
	}
}

// isMessage reports whether line is one JSON-RPC message or a batch of
// them: what the SDK reads without ending the connection.
func isMessage(line []byte) bool {
	// Valid first: the decoder would take a message followed by more.
	if !json.Valid(line) {
		return false
	}
	switch line[0] {
	case '{':
		_, err := jsonrpc.DecodeMessage(line)
		return err == nil
	case '[':
		var batch []json.RawMessage
		if json.Unmarshal(line, &batch) != nil || len(batch) == 0 {
			return false
		}
		for _, m := range batch {
			if _, err := jsonrpc.DecodeMessage(m); err != nil {
				return false
			}
		}
		return true
	}
	return false
}

// droppedLine logs a line of a server's stdout that was not a message,
// redacted and cut, as its stderr is: a server may print its secrets.
func droppedLine(log *slog.Logger, server string, redact func(string) string) func([]byte) {
	return func(line []byte) {
		const most = 1024
		cut := ""
		if len(line) > most {
			line, cut = line[:most], fmt.Sprintf(" [%d bytes more]", len(line)-most)
		}
		log.Warn("MCP server wrote a line on stdout that is not a JSON-RPC message; skipped", "server", server,
			"line", redact(string(bytes.ToValidUTF8(line, []byte("?"))))+cut)
	}
}

package mcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentd-dev/agentd/internal/tool"
)

// ServerConfig is one MCP server: a command speaking MCP on its stdio,
// or a streamable HTTP endpoint.
type ServerConfig struct {
	Name    string            `json:"-"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// ParseConfig reads the {"mcpServers": {"name": {...}}} file editors and
// other agents use, servers in name order.
func ParseConfig(data []byte) ([]ServerConfig, error) {
	var f struct {
		Servers map[string]ServerConfig `json:"mcpServers"`
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("MCP configuration: %w", err)
	}
	var out []ServerConfig
	for name, s := range f.Servers {
		s.Name = name
		if err := s.check(); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ProjectFile is where a project keeps its MCP servers, relative to its
// directory. It names commands agentd would start, and a model working
// in the project can write it: its servers start only for a project a
// person trusted (see LoadProject).
const ProjectFile = ".agentd/mcp.json"

// Project is a project's MCP configuration as read: the bytes a person
// is asked to trust and the servers parsed from exactly those bytes, so
// what starts is what was trusted.
type Project struct {
	// Dir is the project directory; Path the file.
	Dir, Path string
	Data      []byte
	Servers   []ServerConfig
}

// ReadProject reads the project's MCP configuration in dir, trusted or
// not; nil for a project without the file.
func ReadProject(dir string) (*Project, error) {
	p := filepath.Join(dir, ProjectFile)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	servers, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &Project{Dir: dir, Path: p, Data: data, Servers: servers}, nil
}

// Trust says whether a person trusted a project's file with exactly
// this content (package trust keeps the grants).
type Trust interface {
	Trusted(dir, file string, content []byte) bool
}

// UntrustedError is a project's MCP configuration that was not used
// because nobody trusted it as it is: a model that can write the project
// could have written it.
type UntrustedError struct{ Project *Project }

func (e *UntrustedError) Error() string {
	return fmt.Sprintf("the MCP servers of %s were not started: this project is not trusted (or the file changed since it was), and a model working in the project could have written it; to trust the file as it is now, run: agentd trust %s",
		e.Project.Path, e.Project.Dir)
}

// LoadProject reads the project's MCP servers in dir and returns them
// if t trusts the file as it is; an untrusted file gives no servers and
// an *UntrustedError with the file (its servers, to ask a person about).
// A project without the file has none; nil t trusts nothing.
func LoadProject(dir string, t Trust) ([]ServerConfig, error) {
	p, err := ReadProject(dir)
	if err != nil || p == nil {
		return nil, err
	}
	if t == nil || !t.Trusted(dir, ProjectFile, p.Data) {
		return nil, &UntrustedError{Project: p}
	}
	return p.Servers, nil
}

// Notice is a tool source with no tools that names why some are missing:
// an untrusted project configuration, reported where failed servers are
// (get_tools' unavailable, agentd tools).
type Notice []tool.Unavailable

// Tools are none.
func (Notice) Tools() []tool.Tool { return nil }

// Watch never calls changed: a notice does not change.
func (Notice) Watch(func()) func() { return func() {} }

// Unavailable is the notice.
func (n Notice) Unavailable() []tool.Unavailable { return n }

// UntrustedNotice is the notice of an untrusted project file.
func UntrustedNotice(e *UntrustedError) Notice {
	return Notice{{Source: "project:" + e.Project.Path, Error: e.Error()}}
}

// Merge joins lists of servers; a server named again replaces the
// earlier one in its place.
func Merge(lists ...[]ServerConfig) []ServerConfig {
	var out []ServerConfig
	at := map[string]int{}
	for _, l := range lists {
		for _, c := range l {
			if i, ok := at[c.Name]; ok {
				out[i] = c
				continue
			}
			at[c.Name] = len(out)
			out = append(out, c)
		}
	}
	return out
}

func (s ServerConfig) check() error {
	switch {
	case s.Name == "":
		return errors.New("an MCP server needs a name")
	case s.Command == "" && s.URL == "":
		return fmt.Errorf("MCP server %s: needs a command or a url", s.Name)
	case s.Command != "" && s.URL != "":
		return fmt.Errorf("MCP server %s: has both a command and a url; give one", s.Name)
	}
	return nil
}

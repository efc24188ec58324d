package config

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// MinTokenLength is the shortest --token accepted.
const MinTokenLength = 16

// Serve configures `agentd serve`: where it listens, who may connect and
// the limits it enforces.
type Serve struct {
	// Host and Port are where the WebSocket and HTTP endpoints listen
	// ($AGENTD_HOST, default 127.0.0.1; $AGENTD_PORT, default 3141).
	Host string
	Port int
	// Stdio serves one client on stdin/stdout instead of listening.
	Stdio bool
	// Token, when set, is required of every WebSocket client
	// ($AGENTD_TOKEN). It is required when Host is not a loopback address.
	Token string
	// AllowOrigins are browser origins allowed to connect (host patterns).
	AllowOrigins StringList
	// AuthCommand, when set, is a program asked about each connection
	// (the request as JSON on stdin, {"allowed", "reason"} on stdout);
	// split on spaces, no shell.
	AuthCommand string
	// JWTSecretFile holds the HS256 secret of the JWTs clients present
	// ($AGENTD_JWT_SECRET_FILE); JWTKeys is a PEM or JWK Set file of
	// public keys for RS256, ES256 or EdDSA ($AGENTD_JWT_KEYS). At most
	// one. JWTIssuer and JWTAudience, when set, must match the token's.
	JWTSecretFile string
	JWTKeys       string
	JWTIssuer     string
	JWTAudience   string
	// SessionWS serves the per-session WebSocket (/api/v1/ws/sessions/).
	// Off loopback it needs JWT keys: asked for there without them, the
	// server refuses to start; left at its default, Check turns it off
	// and says why in SessionWSOff.
	SessionWS    bool
	sessionWSSet bool
	// SessionWSOff is why Check turned the per-session WebSocket off, for
	// the log.
	SessionWSOff string
	// WS bounds the per-session WebSocket's clients.
	WSHeartbeat                time.Duration
	WSProgressInterval         time.Duration
	WSMaxConnectionsPerSubject int
	WSMessageRate              int
	WSMaxMessageBytes          int
	WSMaxQueuedBytes           int
	// AllowedHosts are more names clients reach the server by (the Host
	// header of every request must name the server: loopback names, IP
	// literals, the listen address, or one of these).
	AllowedHosts StringList
	// Model is the default model of new sessions (provider/id[:thinking]).
	Model string
	// Policy is a permission policy file ($AGENTD_POLICY).
	Policy string
	// MCPConfig is a file of MCP servers whose tools every session gets
	// ($AGENTD_MCP_CONFIG).
	MCPConfig string
	// StreamFormat is "full" (pi's message_update) or "delta".
	StreamFormat string
	// SessionsDir holds session files (default <data-dir>/sessions);
	// AllowSessionDirs are more places load_session accepts files from.
	SessionsDir      string
	AllowSessionDirs StringList

	MaxSessions       int
	MaxConnections    int
	MaxFrameBytes     int
	RateLimit         int // commands per minute per session; 0 disables
	GlobalRateLimit   int // commands per minute for the server; 0 disables
	MaxPending        int
	MaxQueuedBytes    int
	MaxQueuedTotal    int64 // bytes queued for all clients together
	ControlRateLimit  int   // control commands per minute per session; 0 disables
	ShutdownTimeout   time.Duration
	DependencyTimeout time.Duration
	IdempotencyTTL    time.Duration
	CommandTimeout    time.Duration // long commands (prompt, bash, compact); 0: none
	Heartbeat         time.Duration
	EventLogSize      int
	// RESTSessionIdle is how long a REST client's attachment (gptme's
	// "session": the handle its event stream and commands name) stays
	// with no stream attached and no request naming it.
	RESTSessionIdle time.Duration
	// RESTMaxStreamsPerSubject bounds the REST face's event streams one
	// JWT subject holds on a node at once.
	RESTMaxStreamsPerSubject int
	// Cluster makes serve a node of a cluster (--cluster).
	Cluster Cluster
	// PprofAddr, when set, is a loopback address where net/http/pprof's
	// profiles are served, apart from the clients' listener: for
	// profiling the server under load (agentd bench --server-flags).
	PprofAddr string
	// GCPercent is the collector's target for serve (Go's GOGC): how far
	// the heap may grow past what the last collection left live before
	// the next one. serve's default is 200 ($GOGC, when set, instead):
	// a busy server spends a tenth or more of its CPU collecting the
	// garbage of streams, which is short-lived, at 100; -1 turns the
	// collector off.
	GCPercent int
	// MemoryLimit is a soft limit on the Go runtime's memory in bytes
	// (Go's GOMEMLIMIT), near which the collector runs more often,
	// whatever GCPercent allows; 0 keeps the runtime's ($GOMEMLIMIT, or
	// none).
	MemoryLimit ByteSize
	// Engine bounds runs and queues of the sessions served.
	Engine  Engine
	envErrs []error
}

// StringList is a repeatable string flag.
type StringList []string

func (l *StringList) String() string { return strings.Join(*l, ",") }

// Set adds one value.
func (l *StringList) Set(v string) error { *l = append(*l, v); return nil }

// ServeDefaults returns serve's configuration before flags, from the
// environment.
func ServeDefaults(getenv func(string) string) Serve {
	s := Serve{
		Host: "127.0.0.1", Port: 3141, Token: getenv("AGENTD_TOKEN"), Policy: getenv("AGENTD_POLICY"), MCPConfig: getenv("AGENTD_MCP_CONFIG"), AuthCommand: getenv("AGENTD_AUTH_COMMAND"),
		StreamFormat: "full",
		MaxSessions:  100, MaxConnections: 1000, MaxFrameBytes: 10 << 20,
		RateLimit: 100, GlobalRateLimit: 1000, ControlRateLimit: 120, MaxPending: 256, MaxQueuedBytes: 64 << 20,
		MaxQueuedTotal:  256 << 20,
		ShutdownTimeout: 30 * time.Second, DependencyTimeout: 30 * time.Second,
		IdempotencyTTL: 10 * time.Minute, Heartbeat: 30 * time.Second, EventLogSize: 4096,
		JWTSecretFile: getenv("AGENTD_JWT_SECRET_FILE"), JWTKeys: getenv("AGENTD_JWT_KEYS"),
		JWTIssuer: getenv("AGENTD_JWT_ISSUER"), JWTAudience: getenv("AGENTD_JWT_AUDIENCE"),
		SessionWS: true, WSHeartbeat: 30 * time.Second, WSProgressInterval: time.Second,
		WSMaxConnectionsPerSubject: 100, WSMessageRate: 10, WSMaxMessageBytes: 1 << 20, WSMaxQueuedBytes: 8 << 20,
		RESTSessionIdle: 30 * time.Minute, RESTMaxStreamsPerSubject: 100, Cluster: ClusterDefaults(getenv),
		Engine: Engine{Sandbox: Sandbox{Mode: "workspace-write"}},
	}
	s.GCPercent = DefaultGCPercent
	if v := getenv("GOGC"); v != "" {
		if n, err := parseGCPercent(v); err == nil {
			s.GCPercent = n
		} else {
			s.envErrs = append(s.envErrs, fmt.Errorf("GOGC=%q: %w", v, err))
		}
	}
	if v := getenv("AGENTD_HOST"); v != "" {
		s.Host = v
	}
	if v := getenv("AGENTD_PORT"); v != "" {
		if p, err := strconv.Atoi(v); err == nil {
			s.Port = p
		} else {
			s.envErrs = append(s.envErrs, fmt.Errorf("AGENTD_PORT=%q: want a port number", v))
		}
	}
	for _, e := range []struct {
		name string
		dst  *int
	}{{"AGENTD_MAX_SESSIONS", &s.MaxSessions}, {"AGENTD_MAX_CONNECTIONS", &s.MaxConnections}} {
		if v := getenv(e.name); v != "" {
			if n, err := strconv.Atoi(v); err == nil {
				*e.dst = n
			} else {
				s.envErrs = append(s.envErrs, fmt.Errorf("%s=%q: want a number", e.name, v))
			}
		}
	}
	if v := getenv("AGENTD_SHUTDOWN_TIMEOUT"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			s.ShutdownTimeout = d
		} else {
			s.envErrs = append(s.envErrs, fmt.Errorf("AGENTD_SHUTDOWN_TIMEOUT=%q: want a duration such as 30s", v))
		}
	}
	return s
}

// Register adds serve's flags to fs.
func (s *Serve) Register(fs *flag.FlagSet) {
	s.Cluster.Register(fs)
	fs.StringVar(&s.Host, "host", s.Host, "address to listen on; anything but loopback requires --token (env AGENTD_HOST)")
	fs.IntVar(&s.Port, "port", s.Port, "port to listen on; 0 picks a free one (env AGENTD_PORT)")
	fs.BoolVar(&s.Stdio, "stdio", false, "serve one client on stdin/stdout instead of listening")
	fs.StringVar(&s.Token, "token", s.Token, "token clients must present (Authorization: Bearer, or ?token=; with --stdio, an authenticate command first) (env AGENTD_TOKEN)")
	fs.Var(&s.AllowOrigins, "allow-origin", "browser origin allowed to connect, as a host pattern (repeatable)")
	fs.StringVar(&s.AuthCommand, "auth-command", s.AuthCommand, `program that decides about each connection, besides --token: it reads {"transport","remote","path","headers"} as JSON on stdin and answers {"allowed":true|false,"reason":"..."}; split on spaces, no shell (env AGENTD_AUTH_COMMAND)`)
	fs.StringVar(&s.JWTSecretFile, "jwt-secret-file", s.JWTSecretFile, "file holding the HS256 secret of client JWTs, at least 32 bytes (env AGENTD_JWT_SECRET_FILE)")
	fs.StringVar(&s.JWTKeys, "jwt-keys", s.JWTKeys, "PEM or JWK Set file of public keys verifying client JWTs: RS256, ES256/384/512 or EdDSA, fixed by each key's type (env AGENTD_JWT_KEYS)")
	fs.StringVar(&s.JWTIssuer, "jwt-issuer", s.JWTIssuer, "iss every client JWT must carry (env AGENTD_JWT_ISSUER)")
	fs.StringVar(&s.JWTAudience, "jwt-audience", s.JWTAudience, "aud every client JWT must include (env AGENTD_JWT_AUDIENCE)")
	fs.Var(explicitBool{&s.SessionWS, &s.sessionWSSet}, "session-ws", "serve the per-session WebSocket at /api/v1/ws/sessions/{id} (off loopback it needs --jwt-secret-file or --jwt-keys and is off without them)")
	fs.DurationVar(&s.WSHeartbeat, "ws-heartbeat", s.WSHeartbeat, "per-session WebSocket: ping interval; a client silent for two intervals is closed with 1001 (0 disables)")
	fs.DurationVar(&s.WSProgressInterval, "ws-progress-interval", s.WSProgressInterval, "per-session WebSocket: least time between two progress_updates of a session")
	fs.IntVar(&s.WSMaxConnectionsPerSubject, "ws-max-connections-per-subject", s.WSMaxConnectionsPerSubject, "per-session WebSocket: connections one JWT subject may hold")
	fs.IntVar(&s.WSMessageRate, "ws-message-rate", s.WSMessageRate, "per-session WebSocket: messages a connection may send per second; over it the connection is closed with 4429")
	fs.IntVar(&s.WSMaxMessageBytes, "ws-max-message-bytes", s.WSMaxMessageBytes, "per-session WebSocket: largest client message")
	fs.IntVar(&s.WSMaxQueuedBytes, "ws-max-queued-bytes", s.WSMaxQueuedBytes, "per-session WebSocket: bytes waiting for one client before it is closed with 1011 (progress_updates are dropped first, other messages never)")
	fs.Var(&s.AllowedHosts, "allowed-host", "another host name clients reach the server by; requests naming any other host are refused (repeatable)")
	fs.StringVar(&s.Model, "model", "", "default model of new sessions, provider/id[:thinking]")
	fs.StringVar(&s.Policy, "policy", s.Policy, "permission policy file: allow / ask / deny rules by tool and argument (env AGENTD_POLICY)")
	fs.StringVar(&s.MCPConfig, "mcp-config", s.MCPConfig, `MCP servers whose tools every session gets: a JSON file {"mcpServers": {name: {command, args, env, cwd} | {url, headers}}}; started once with the server and stopped with it (env AGENTD_MCP_CONFIG)`)
	fs.StringVar(&s.StreamFormat, "stream-format", s.StreamFormat, "message_update payload: full (pi's) or delta")
	fs.StringVar(&s.SessionsDir, "sessions-dir", "", "directory for session files (default <data-dir>/sessions)")
	fs.Var(&s.AllowSessionDirs, "allow-session-dir", "another directory load_session may open files from (repeatable)")
	fs.IntVar(&s.MaxSessions, "max-sessions", s.MaxSessions, "sessions held at once (env AGENTD_MAX_SESSIONS)")
	fs.IntVar(&s.MaxConnections, "max-connections", s.MaxConnections, "WebSocket connections at once (env AGENTD_MAX_CONNECTIONS)")
	fs.IntVar(&s.MaxFrameBytes, "max-frame-bytes", s.MaxFrameBytes, "largest inbound frame or stdio line")
	fs.IntVar(&s.RateLimit, "rate-limit", s.RateLimit, "commands per minute per session (server commands share one budget); 0 disables")
	fs.IntVar(&s.GlobalRateLimit, "global-rate-limit", s.GlobalRateLimit, "commands per minute for the whole server; 0 disables")
	fs.IntVar(&s.ControlRateLimit, "control-rate-limit", s.ControlRateLimit, "control commands (delete_session, switch_session, abort*, extension_ui_response) per minute per session, counted apart from the rest; 0 disables")
	fs.IntVar(&s.MaxPending, "max-pending", s.MaxPending, "commands one connection may have in flight")
	fs.IntVar(&s.MaxQueuedBytes, "max-queued-bytes", s.MaxQueuedBytes, "bytes waiting to be sent to one client before it is disconnected as too slow")
	fs.Int64Var(&s.MaxQueuedTotal, "max-queued-bytes-total", s.MaxQueuedTotal, "bytes waiting to be sent to all clients together; beyond it the clients furthest behind are disconnected first")
	fs.DurationVar(&s.ShutdownTimeout, "shutdown-timeout", s.ShutdownTimeout, "how long running commands may finish on SIGTERM (env AGENTD_SHUTDOWN_TIMEOUT)")
	fs.DurationVar(&s.DependencyTimeout, "dependency-timeout", s.DependencyTimeout, "how long a command waits for its dependsOn")
	fs.DurationVar(&s.IdempotencyTTL, "idempotency-ttl", s.IdempotencyTTL, "how long an idempotencyKey's outcome is replayed")
	fs.DurationVar(&s.CommandTimeout, "command-timeout", 0, "limit for long commands (prompt, bash, compact); 0 means none")
	fs.DurationVar(&s.Heartbeat, "heartbeat", s.Heartbeat, "WebSocket ping interval; 0 disables")
	fs.IntVar(&s.EventLogSize, "event-log-size", s.EventLogSize, "events kept per session for switch_session afterSeq resume")
	fs.Var(gcPercent{&s.GCPercent}, "gc-percent", "garbage collector target, as Go's GOGC: how far (in percent) the heap may grow past what is live before the next collection; more saves CPU and costs memory; off disables ($GOGC, when set, is the default)")
	fs.Var(&s.MemoryLimit, "memory-limit", "soft limit on the server's memory, as Go's GOMEMLIMIT (e.g. 512MiB, 2GiB): near it the collector runs more often, whatever --gc-percent allows (default: env GOMEMLIMIT, else none)")
	fs.StringVar(&s.PprofAddr, "pprof-addr", "", "serve Go's profiles (net/http/pprof) on this loopback host:port, for profiling under load; off by default")
	fs.DurationVar(&s.RESTSessionIdle, "rest-session-idle", s.RESTSessionIdle, "how long a REST client's session (the handle its event stream and commands name) stays with no stream attached and no request naming it")
	fs.IntVar(&s.RESTMaxStreamsPerSubject, "rest-max-streams-per-subject", s.RESTMaxStreamsPerSubject, "REST event streams one JWT subject may hold on this node; over it GET .../events answers 429")
	s.Engine.Register(fs)
}

// Check validates s.
func (s *Serve) Check() error {
	errs := append([]error(nil), s.envErrs...)
	if err := s.Engine.Check(); err != nil {
		errs = append(errs, err)
	}
	if s.Port < 0 || s.Port > 65535 {
		errs = append(errs, fmt.Errorf("--port %d: want 0-65535", s.Port))
	}
	// A token that is only whitespace was meant as a token (a quoting
	// slip, an empty secret in a template): taking it as no token would
	// start the server with no authentication at all.
	blankToken := s.Token != "" && strings.TrimSpace(s.Token) == ""
	s.Token = strings.TrimSpace(s.Token)
	if blankToken {
		errs = append(errs, errors.New("--token (or AGENTD_TOKEN) is only whitespace: give a real token (`agentd token` prints a random one), or leave it unset for no token on loopback"))
	}
	jwt := s.JWTSecretFile != "" || s.JWTKeys != ""
	if s.JWTSecretFile != "" && s.JWTKeys != "" {
		errs = append(errs, errors.New("--jwt-secret-file and --jwt-keys: give one (HS256 with a secret, or public keys), not both"))
	}
	if !s.Stdio && s.Token == "" && !jwt && !loopback(s.Host) {
		errs = append(errs, fmt.Errorf("--host %s is reachable from other machines: set --token (or AGENTD_TOKEN) so only clients with the token can connect, or JWT keys (--jwt-secret-file, --jwt-keys); `agentd token` prints a new token", s.Host))
	}
	if !s.Stdio && s.SessionWS && !jwt && !loopback(s.Host) {
		// The face authorizes each session by a JWT's subject; a shared
		// token reachable from other machines would hand every session
		// to whoever holds it.
		why := fmt.Sprintf("--host %s is reachable from other machines and the per-session WebSocket authorizes each session by a JWT's subject: give --jwt-secret-file or --jwt-keys to serve it", s.Host)
		if s.sessionWSSet {
			errs = append(errs, errors.New(why))
		} else {
			s.SessionWS, s.SessionWSOff = false, why
		}
	}
	if s.Engine.Sandbox.Fallback == "" {
		// A newcomer's server on its own machine starts wherever Landlock
		// is missing (macOS, some containers), with a warning and a
		// lasting health issue; one other machines reach refuses to start
		// unconfined unless told to.
		s.Engine.Sandbox.Fallback = SandboxRefuse
		if s.Stdio || loopback(s.Host) {
			s.Engine.Sandbox.Fallback = SandboxUnconfined
		}
	}
	if s.Token != "" && len(s.Token) < MinTokenLength {
		errs = append(errs, fmt.Errorf("--token: %d characters is too short to resist guessing (at least %d); `agentd token` prints a random one", len(s.Token), MinTokenLength))
	}
	if s.StreamFormat != "full" && s.StreamFormat != "delta" {
		errs = append(errs, fmt.Errorf("--stream-format %q: want full or delta", s.StreamFormat))
	}
	positive := []struct {
		name string
		v    int
	}{{"--max-sessions", s.MaxSessions}, {"--max-connections", s.MaxConnections}, {"--max-pending", s.MaxPending}, {"--event-log-size", s.EventLogSize},
		{"--ws-max-connections-per-subject", s.WSMaxConnectionsPerSubject}, {"--ws-message-rate", s.WSMessageRate},
		{"--rest-max-streams-per-subject", s.RESTMaxStreamsPerSubject}}
	for _, p := range positive {
		if p.v < 1 {
			errs = append(errs, fmt.Errorf("%s %d: must be at least 1", p.name, p.v))
		}
	}
	if s.WSMaxMessageBytes < 1024 {
		errs = append(errs, fmt.Errorf("--ws-max-message-bytes %d: must be at least 1024", s.WSMaxMessageBytes))
	}
	if s.WSMaxQueuedBytes < 64<<10 {
		errs = append(errs, fmt.Errorf("--ws-max-queued-bytes %d: must be at least 65536", s.WSMaxQueuedBytes))
	}
	if s.WSProgressInterval < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("--ws-progress-interval %s: must be at least 10ms", s.WSProgressInterval))
	}
	if s.MaxFrameBytes < 1024 {
		errs = append(errs, fmt.Errorf("--max-frame-bytes %d: must be at least 1024", s.MaxFrameBytes))
	}
	if s.MaxQueuedBytes < s.MaxFrameBytes && s.MaxQueuedBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("--max-queued-bytes %d: must be at least 1 MiB", s.MaxQueuedBytes))
	}
	if s.MaxQueuedTotal < int64(s.MaxQueuedBytes) {
		errs = append(errs, fmt.Errorf("--max-queued-bytes-total %d: must be at least --max-queued-bytes (%d)", s.MaxQueuedTotal, s.MaxQueuedBytes))
	}
	if s.RateLimit < 0 || s.GlobalRateLimit < 0 || s.ControlRateLimit < 0 {
		errs = append(errs, errors.New("rate limits must not be negative (0 disables)"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--shutdown-timeout", s.ShutdownTimeout}, {"--dependency-timeout", s.DependencyTimeout}, {"--idempotency-ttl", s.IdempotencyTTL}, {"--command-timeout", s.CommandTimeout}, {"--heartbeat", s.Heartbeat}, {"--ws-heartbeat", s.WSHeartbeat}, {"--rest-session-idle", s.RESTSessionIdle}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %s: must not be negative", d.name, d.v))
		}
	}
	if s.PprofAddr != "" {
		// Profiles show memory and timing: never off this machine.
		if h, _, err := net.SplitHostPort(s.PprofAddr); err != nil || !loopback(h) {
			errs = append(errs, fmt.Errorf("--pprof-addr %q: want a loopback host:port such as 127.0.0.1:6060", s.PprofAddr))
		}
	}
	if s.GCPercent < -1 {
		errs = append(errs, fmt.Errorf("--gc-percent %d: want a percentage, or off", s.GCPercent))
	}
	if s.MemoryLimit < 0 {
		errs = append(errs, fmt.Errorf("--memory-limit %d: must not be negative", s.MemoryLimit))
	}
	errs = append(errs, s.Cluster.check(s.Port, s.Stdio)...)
	return errors.Join(errs...)
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// explicitBool is a boolean flag that records whether it was given.
type explicitBool struct {
	v   *bool
	set *bool
}

func (b explicitBool) String() string {
	if b.v == nil {
		return "false"
	}
	return strconv.FormatBool(*b.v)
}

func (b explicitBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true or false, not %q", s)
	}
	*b.v, *b.set = v, true
	return nil
}

// IsBoolFlag lets the flag be given without a value.
func (b explicitBool) IsBoolFlag() bool { return true }

// DefaultGCPercent is serve's GCPercent when $GOGC is not set. Measured
// with agentd bench, 1,000 delta streams: 100 -> 200 cut the server's CPU
// per event by about a fifth; RSS after 100 full-format 2,000-token
// streams rose from about 120 to 175-200 MB (300 reached 285 MB).
const DefaultGCPercent = 200

// parseGCPercent reads a GOGC value: a percentage, or "off" (-1).
func parseGCPercent(v string) (int, error) {
	if strings.EqualFold(v, "off") {
		return -1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, errors.New("want a percentage such as 200, or off")
	}
	return n, nil
}

// gcPercent is the --gc-percent flag: a GOGC value.
type gcPercent struct{ v *int }

func (g gcPercent) String() string {
	switch {
	case g.v == nil:
		return ""
	case *g.v < 0:
		return "off"
	}
	return strconv.Itoa(*g.v)
}

func (g gcPercent) Set(v string) error {
	n, err := parseGCPercent(v)
	if err != nil {
		return err
	}
	*g.v = n
	return nil
}

// ByteSize is a number of bytes given as GOMEMLIMIT writes them: an
// integer with an optional unit B, KiB, MiB, GiB or TiB.
type ByteSize int64

func (b *ByteSize) String() string {
	if b == nil || *b == 0 {
		return ""
	}
	return strconv.FormatInt(int64(*b), 10)
}

// Set parses a size such as 512MiB.
func (b *ByteSize) Set(v string) error {
	num, mult := strings.TrimSpace(v), int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<63-1)/mult {
		return fmt.Errorf("%q: want a size such as 512MiB or 2GiB (units B, KiB, MiB, GiB, TiB)", v)
	}
	*b = ByteSize(n * mult)
	return nil
}

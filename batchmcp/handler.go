package batchmcp

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// Path is where a host usually mounts the [Handler].
const Path = "/mcp"

// Defaults of [Config].
const (
	// DefaultMaxAnswerBytes bounds every answer: at one token per byte at
	// worst, it stays well under the 25,000 tokens some clients refuse.
	DefaultMaxAnswerBytes = 20000
	// DefaultPollInterval is the poll interval a task answer suggests.
	DefaultPollInterval = 2 * time.Second
	// DefaultMaxWaitsPerCaller caps the waiting batch_status calls and
	// blocking tasks/result calls of one caller at once.
	DefaultMaxWaitsPerCaller = 8
	// DefaultMaxSubmitsPerCaller caps the submits one caller has in
	// flight at once.
	DefaultMaxSubmitsPerCaller = 4
)

// MaxWaitSeconds is the longest wait batch_status takes: well under the
// shortest tool-call timeout of common clients (60 s).
const MaxWaitSeconds = 30

// Config configures [New].
type Config struct {
	// Runner serves the jobs. Required.
	Runner *batch.Runner
	// Authenticate resolves every HTTP request to a caller before the MCP
	// server sees it: the same function the host gives batchhttp, so that
	// a caller over MCP is the same caller, with the same jobs, as over
	// HTTP. It writes its own refusal. Required.
	Authenticate batchhttp.CallerFunc
	// Precheck checks each target URL at submit, as
	// batchhttp.HandlerConfig.Precheck does. Defaults to no check.
	Precheck batchhttp.PrecheckFunc
	// CheckTarget checks each target's options at submit, as
	// batchhttp.HandlerConfig.CheckTarget does. Defaults to no check.
	CheckTarget batchhttp.CheckTargetFunc
	// Logger gets one line per MCP request. Defaults to discarding them.
	Logger *slog.Logger
	// Metrics, if set, gets the request counters and durations (see
	// [Handler] for the names). Defaults to none.
	Metrics *metrics.Set
	// MetricsPrefix prefixes the metric names. Defaults to "batch".
	MetricsPrefix string
	// MaxAnswerBytes bounds the encoded result of any tool call, resource
	// read or task answer; content is paged to fit. Defaults to
	// [DefaultMaxAnswerBytes]; at least 4096.
	MaxAnswerBytes int
	// MaxBodyBytes caps an MCP request body. Defaults to
	// batchhttp.MaxBodyBytes plus room for the JSON-RPC envelope.
	MaxBodyBytes int64
	// PollInterval is the interval task answers suggest between polls.
	// Defaults to [DefaultPollInterval].
	PollInterval time.Duration
	// BodyTimeout bounds the read of a request's body: a client that
	// sends its headers and then stalls is cut off after it. Defaults to
	// batchhttp.DefaultBodyTimeout.
	BodyTimeout time.Duration
	// MaxSubmitsPerCaller caps the batch_submit calls one caller has in
	// flight at once; one more is refused with code submits_busy. The
	// count is this handler's. Defaults to [DefaultMaxSubmitsPerCaller].
	MaxSubmitsPerCaller int
	// MaxWaitsPerCaller caps the calls one caller holds waiting at once
	// (batch_status with wait_seconds, tasks/result); one more is refused
	// with code waits_busy. The count is this handler's. Defaults to
	// [DefaultMaxWaitsPerCaller].
	MaxWaitsPerCaller int
	// Name and Version name the server to clients. Default to "batchkit"
	// and "1".
	Name, Version string
}

// Handler serves the MCP server over streamable HTTP: mount it at [Path]
// behind the host's own middleware. It is stateless: any node of a cluster
// answers any request, tasks included.
//
// With Config.Metrics set it registers, with the prefix,
// <p>_mcp_requests_total{method,tool,result} (result: ok, tool_error,
// error) and <p>_mcp_request_seconds{method}.
type Handler struct {
	cfg     Config
	log     *slog.Logger
	server  *mcp.Server
	http    http.Handler
	waits   *perCaller
	submits *perCaller
	metrics *meters
}

// New returns the handler of cfg.
func New(cfg Config) (*Handler, error) {
	if cfg.Runner == nil {
		return nil, errors.New("batchmcp: Config.Runner is required")
	}
	if cfg.Authenticate == nil {
		return nil, errors.New("batchmcp: Config.Authenticate is required")
	}
	if cfg.MaxAnswerBytes == 0 {
		cfg.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	if cfg.MaxAnswerBytes < 4096 {
		return nil, errors.New("batchmcp: Config.MaxAnswerBytes is below 4096")
	}
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, batchhttp.MaxBodyBytes+16<<10)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultPollInterval)
	cfg.MaxWaitsPerCaller = cmp.Or(cfg.MaxWaitsPerCaller, DefaultMaxWaitsPerCaller)
	cfg.MaxSubmitsPerCaller = cmp.Or(cfg.MaxSubmitsPerCaller, DefaultMaxSubmitsPerCaller)
	cfg.BodyTimeout = cmp.Or(cfg.BodyTimeout, batchhttp.DefaultBodyTimeout)
	cfg.Name = cmp.Or(cfg.Name, "batchkit")
	cfg.Version = cmp.Or(cfg.Version, "1")
	h := &Handler{
		cfg:     cfg,
		log:     cfg.Logger,
		waits:   newPerCaller(cfg.MaxWaitsPerCaller),
		submits: newPerCaller(cfg.MaxSubmitsPerCaller),
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics != nil {
		h.metrics = newMeters(cfg.Metrics, cmp.Or(cfg.MetricsPrefix, "batch"))
	}
	s, err := h.newServer()
	if err != nil {
		return nil, err
	}
	h.server = s
	h.http = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{
		Stateless:           true,
		JSONResponse:        true,
		MaxRequestBodyBytes: cfg.MaxBodyBytes,
		Logger:              slog.New(slog.DiscardHandler), // its lines may quote a request
	})
	return h, nil
}

// ServeHTTP authenticates the request with Config.Authenticate, reads its
// body within Config.BodyTimeout and hands it to the MCP server.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	caller, ok := h.cfg.Authenticate(w, r)
	if !ok {
		return
	}
	if caller.Name == "" {
		batchhttp.WriteError(w, http.StatusInternalServerError, batchhttp.CodeInternal, "internal error", "")
		return
	}
	in, ok := h.intake(w, r)
	if !ok {
		return
	}
	ctx := withCaller(r.Context(), caller)
	ctx = context.WithValue(ctx, intakeKey{}, in)
	if in.submit {
		if !h.submits.acquire(caller.Name) {
			in.busy = true // batch_submit answers submits_busy
		} else {
			defer h.submits.release(caller.Name)
		}
	}
	if in.method == methodTasksResult {
		// It waits until the job finished, past any write timeout of
		// the server's; Config.MaxWaitsPerCaller bounds how many wait.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	}
	h.http.ServeHTTP(w, r.WithContext(ctx))
}

// intake is what ServeHTTP read of a request ahead of the SDK.
type intake struct {
	method    string
	submit    bool // a tools/call of batch_submit
	task      bool // with a 2025-11-25 params.task, which the SDK has no field for
	busy      bool // over Config.MaxSubmitsPerCaller
	requestID string
}

type intakeKey struct{}

// intakeOf returns the request's intake, or an empty one.
func intakeOf(ctx context.Context) *intake {
	if in, ok := ctx.Value(intakeKey{}).(*intake); ok {
		return in
	}
	return &intake{}
}

// intake reads a POST's body, bounded in size and in time, and peeks at
// what the SDK will decode. The body is handed on unchanged. It writes
// the refusal of a body too large or too slow itself.
func (h *Handler) intake(w http.ResponseWriter, r *http.Request) (*intake, bool) {
	in := &intake{requestID: w.Header().Get(batchhttp.RequestIDHeader)}
	if r.Method != http.MethodPost || r.Body == nil {
		return in, true
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(h.cfg.BodyTimeout))
	body, err := io.ReadAll(io.LimitReader(r.Body, h.cfg.MaxBodyBytes+1))
	_ = rc.SetReadDeadline(time.Time{})
	switch {
	case err != nil:
		w.Header().Set("Connection", "close")
		batchhttp.WriteError(w, http.StatusRequestTimeout, batchhttp.CodeTimeout, "the request body did not arrive in time", "")
		return nil, false
	case int64(len(body)) > h.cfg.MaxBodyBytes:
		w.Header().Set("Connection", "close")
		batchhttp.WriteError(w, http.StatusRequestEntityTooLarge, batchhttp.CodeBodyTooLarge,
			fmt.Sprintf("request body over %d bytes", h.cfg.MaxBodyBytes), "submit fewer targets at once")
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Name string          `json:"name"`
			Task json.RawMessage `json:"task"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) == nil {
		in.method = msg.Method
		in.submit = msg.Method == "tools/call" && msg.Params.Name == toolSubmit
		in.task = in.submit && len(msg.Params.Task) > 0 && string(msg.Params.Task) != "null"
	}
	return in, true
}

type callerKey struct{}

func withCaller(ctx context.Context, c batch.Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// callerOf returns the caller ServeHTTP put in ctx.
func callerOf(ctx context.Context) (batch.Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(batch.Caller)
	return c, ok && c.Name != ""
}

// perCaller counts what each caller holds at once, up to a cap.
type perCaller struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

func newPerCaller(max int) *perCaller { return &perCaller{max: max, n: make(map[string]int)} }

func (p *perCaller) acquire(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n[name] >= p.max {
		return false
	}
	p.n[name]++
	return true
}

func (p *perCaller) release(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n[name]--; p.n[name] <= 0 {
		delete(p.n, name)
	}
}

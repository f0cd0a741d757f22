package batchhttp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// Runner is what the handler needs of a [batch.Runner]; *batch.Runner
// implements it.
type Runner interface {
	SubmitWith(ctx context.Context, caller batch.Caller, targets []batch.Target, opts batch.SubmitOptions) (job batch.JobInfo, reused bool, err error)
	Status(ctx context.Context, caller batch.Caller, id string, opts batch.StatusOptions) (batch.JobInfo, error)
	Wait(ctx context.Context, caller batch.Caller, id string, opts batch.WaitOptions) (batch.JobInfo, error)
	Result(ctx context.Context, caller batch.Caller, id string, idx int) (batch.TargetResult, error)
	Touch(ctx context.Context, caller batch.Caller, id string) error
	Cancel(ctx context.Context, caller batch.Caller, id string) error
	Retry(ctx context.Context, caller batch.Caller, id string) (job batch.JobInfo, reused bool, err error)
	ListWith(ctx context.Context, caller batch.Caller, opts batch.ListOptions) ([]batch.JobInfo, error)
	TargetsPerJob() int
	Options() batch.OptionSet
}

// CallerFunc authenticates a request. It returns the caller and true, or
// writes the refusal itself (401 or 403, ideally with [WriteError]) and
// returns false. A caller with an empty Name is a host bug and answered 500.
type CallerFunc func(w http.ResponseWriter, r *http.Request) (batch.Caller, bool)

// PrecheckFunc checks one target URL at submit, without DNS or any other
// I/O. An error refuses the whole submit (or, with on_invalid "skip",
// skips the target: see [Refusals]) with 422
// "blocked: target <idx>: <reason>", where reason is the error's text
// without a leading "blocked: ", and with the error's hint if it is a
// [batch.HintError] (see [batch.NewFetchError]). The reason goes to the
// caller only, never to a log line, so it may name the host. See [PrecheckURL]. A submit's
// webhook URL passes the same check ("blocked: webhook: <reason>").
type PrecheckFunc func(ctx context.Context, caller batch.Caller, rawURL string) error

// CheckTargetFunc checks one target's options at submit, without I/O: the
// host's own limits on what its fetcher serves (such as the size of a grep
// pattern), which the runner, treating options as data, does not know. An
// error refuses the whole submit (or, with on_invalid "skip", skips the
// target: see [Refusals]) with 422 [CodeInvalidOption]
// "invalid option: target <idx>: <reason>", where reason is the error's
// text, and with the error's hint if it is a [batch.HintError]. The reason
// goes to the caller only, never to a log line.
type CheckTargetFunc func(ctx context.Context, caller batch.Caller, t batch.Target) error

// ObserveFunc receives one observation per request for the host's metrics:
// a fixed route label (one of [RouteList], [RouteJob], [RouteResult],
// [RouteResults], [RouteRetry], [RouteWebhookSecret], [RouteOther]; never a job id), the HTTP status written (499 if the client
// went away first) and the time the handler took. A long-poll takes up to its
// wait.
type ObserveFunc func(route string, status int, d time.Duration)

// Route labels given to an [ObserveFunc] and logged as "route": the paths
// of [Routes], and one label for every other path.
const (
	RouteList    = "/v1/batch"              // POST (submit) and GET (list)
	RouteJob     = "/v1/batch/{id}"         // GET (status, long-poll) and DELETE (cancel)
	RouteResult  = "/v1/batch/{id}/{idx}"   // GET (one result)
	RouteResults = "/v1/batch/{id}/results" // GET (the results stream)
	RouteRetry   = "/v1/batch/{id}/retry"   // POST (retry the failed targets)
	RouteOther   = "/v1/batch/{unmatched}"  // any other path
	// RouteWebhookSecret: GET (the caller's own webhook secret).
	RouteWebhookSecret = "/v1/batch/webhook-secret"
)

// statusClientGone is reported when the client went away before the answer.
const statusClientGone = 499

// HandlerConfig configures [NewHandler].
type HandlerConfig struct {
	// Authenticate resolves every request to a caller before anything else
	// happens. Required; batchserver.NewKeyAuth is a ready one.
	Authenticate CallerFunc
	// Prefix is the path the API is served under, such as "/api": the
	// routes are then Prefix+"/v1/batch…", and [Handler.Mount] registers
	// them there. It starts with "/" and does not end with one. A host
	// that strips the prefix itself (http.StripPrefix) leaves it empty.
	// Either way, a hint that names a route names it under the path the
	// request came in on, such as "GET /api/v1/batch". Defaults to ""
	// (the routes at the root).
	Prefix string
	// Precheck checks each target URL at submit. Defaults to no check; see
	// [PrecheckURL] for a ready one.
	Precheck PrecheckFunc
	// CheckTarget checks each target's options at submit, in idx order,
	// after every URL passed Precheck (a target with an empty URL is left
	// to the runner, which refuses it). Defaults to no check.
	CheckTarget CheckTargetFunc
	// Logger gets one line per request. Defaults to discarding them.
	Logger *slog.Logger
	// Observe gets one observation per request. Defaults to none.
	Observe ObserveFunc
	// BodyTimeout bounds the read of a submit's body: a client that sends
	// its headers and then stalls is cut off after it. Defaults to 10s.
	BodyTimeout time.Duration
	// MaxResultsBytes caps the stored result and error bytes of one
	// ?results=1 answer; a larger job is refused with 422 and a hint to read
	// its results one at a time. Defaults to 8 MiB.
	MaxResultsBytes int64
	// MaxResultsInFlight caps the ?results=1 answers written at once; more
	// wait for a turn for up to a second, then get 429 with Retry-After.
	// Each answer holds one result in memory at a time. Defaults to 4.
	MaxResultsInFlight int
	// MaxResultsPerCaller caps the ?results=1 answers one caller has
	// written at once, within MaxResultsInFlight; one more is answered 429
	// results_busy with Retry-After: 1 at once. An answer its client does
	// not read holds its turn until the server's write timeout, so without
	// this cap one caller's slow readers could hold every turn, and every
	// other caller's ?results=1 would be refused. Below MaxResultsInFlight,
	// a caller always leaves turns to others. The count is this handler's
	// (one node's). Defaults to half of MaxResultsInFlight, at least 1 (2
	// with the defaults).
	MaxResultsPerCaller int
	// WebhookSecret returns the secret that signs the webhook deliveries
	// of the caller named (a [WebhookSender]'s CallerSecret method), which
	// GET /v1/batch/webhook-secret answers to that caller alone, so that
	// a caller can fetch the secret its receiver verifies with. Defaults
	// to nil: that route answers 422 webhooks_disabled.
	WebhookSecret func(caller string) string
	// MaxWaitsPerCaller caps the long-polls (?wait) one caller holds at
	// once; one more is answered 429 waits_busy with Retry-After: 5. A
	// long-poll holds a connection for up to [batch.MaxWait], so without a
	// cap one caller could hold every connection of the server. The count
	// is this handler's (one node's). Defaults to 8.
	MaxWaitsPerCaller int
	// MaxStreamsPerCaller caps the results streams (GET
	// /v1/batch/{id}/results, followed or not) one caller reads at once;
	// one more is answered 429 streams_busy with Retry-After: 5. A stream
	// holds a connection for up to [batch.MaxWait] and, while it writes a
	// line, one result in memory. The count is this handler's (one
	// node's). Defaults to 4.
	MaxStreamsPerCaller int
	// MaxSubmitsPerCaller caps the submits (POST /v1/batch) one caller has
	// in flight at once, from the read of the body to the answer; one more
	// is answered 429 submits_busy with Retry-After: 5, before its body is
	// read. A submit holds its body (up to [MaxBodyBytes]) and its decoded
	// targets in memory, so without a cap one caller's slow or parallel
	// submits could fill the server's memory. The count is this handler's
	// (one node's). Defaults to 4.
	MaxSubmitsPerCaller int
}

// Defaults for [HandlerConfig].
const (
	DefaultBodyTimeout         = 10 * time.Second
	DefaultMaxResultsBytes     = 8 << 20
	DefaultMaxResultsInFlight  = 4
	DefaultMaxWaitsPerCaller   = 8
	DefaultMaxStreamsPerCaller = 4
	DefaultMaxSubmitsPerCaller = 4
)

// Handler serves the /v1/batch wire API. Create one with [NewHandler].
type Handler struct {
	runner   Runner
	auth     CallerFunc
	precheck PrecheckFunc
	check    CheckTargetFunc
	log      *slog.Logger
	observe  ObserveFunc
	prefix   string
	mux      *http.ServeMux
	other    http.Handler // unmatched paths

	bodyTimeout     time.Duration
	maxResultsBytes int64
	resultsSlots    chan struct{} // one token per ?results=1 answer being written
	resultsHeld     *callerSlots  // ?results=1 answers being written, per caller
	waits           *callerSlots  // long-polls held, per caller
	streams         *callerSlots  // results streams open, per caller
	submits         *callerSlots  // submits being read, decoded and made, per caller
	summaries       *summaryCache
	webhookSecret   func(caller string) string
}

// summaryCacheBytes bounds the encoded status summaries a handler keeps.
const summaryCacheBytes = 4 << 20

// NewHandler returns a handler serving runner over HTTP: the operations of
// [Routes], under [HandlerConfig].Prefix. Mount it with [Handler.Mount].
// docs/http-api.md in the repository describes each route.
func NewHandler(runner Runner, opts *HandlerConfig) (*Handler, error) {
	if runner == nil {
		return nil, errors.New("batchhttp: runner is required")
	}
	if opts == nil || opts.Authenticate == nil {
		return nil, errors.New("batchhttp: HandlerConfig.Authenticate is required")
	}
	if opts.BodyTimeout < 0 || opts.MaxResultsBytes < 0 || opts.MaxResultsInFlight < 0 || opts.MaxResultsPerCaller < 0 ||
		opts.MaxWaitsPerCaller < 0 || opts.MaxStreamsPerCaller < 0 || opts.MaxSubmitsPerCaller < 0 {
		return nil, errors.New("batchhttp: HandlerConfig limits must not be negative")
	}
	if err := checkPrefix(opts.Prefix); err != nil {
		return nil, err
	}
	inFlight := cmp.Or(opts.MaxResultsInFlight, DefaultMaxResultsInFlight)
	h := &Handler{
		runner:          runner,
		auth:            opts.Authenticate,
		precheck:        opts.Precheck,
		check:           opts.CheckTarget,
		log:             opts.Logger,
		observe:         opts.Observe,
		prefix:          opts.Prefix,
		mux:             http.NewServeMux(),
		bodyTimeout:     cmp.Or(opts.BodyTimeout, DefaultBodyTimeout),
		maxResultsBytes: cmp.Or(opts.MaxResultsBytes, DefaultMaxResultsBytes),
		resultsSlots:    make(chan struct{}, inFlight),
		resultsHeld:     newCallerSlots(cmp.Or(opts.MaxResultsPerCaller, max(inFlight/2, 1)), errResultsBusyCaller),
		waits:           newCallerSlots(cmp.Or(opts.MaxWaitsPerCaller, DefaultMaxWaitsPerCaller), errWaitsBusy),
		streams:         newCallerSlots(cmp.Or(opts.MaxStreamsPerCaller, DefaultMaxStreamsPerCaller), errStreamsBusy),
		submits:         newCallerSlots(cmp.Or(opts.MaxSubmitsPerCaller, DefaultMaxSubmitsPerCaller), errSubmitsBusy),
		summaries:       newSummaryCache(summaryCacheBytes),
		webhookSecret:   opts.WebhookSecret,
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.other = h.route(RouteOther, func(http.ResponseWriter, *http.Request, *request) error { return notFound })
	// One method-less pattern per path, which picks the operation by
	// method: ServeMux would refuse "POST /v1/batch/{id}/retry" beside
	// "GET /v1/batch/{id}/{idx}" (neither is more specific), while the
	// method-less "/v1/batch/{id}/retry" is more specific than
	// "/v1/batch/{id}/{idx}".
	for _, path := range routePaths() {
		h.mux.Handle(h.prefix+path, h.byMethod(path))
	}
	h.mux.Handle("/", h.other)
	return h, nil
}

// checkPrefix reports whether p can be [HandlerConfig].Prefix.
func checkPrefix(p string) error {
	if p == "" {
		return nil
	}
	if p[0] != '/' || strings.HasSuffix(p, "/") || path.Clean(p) != p || strings.ContainsAny(p, "{}?#% ") {
		return fmt.Errorf("batchhttp: HandlerConfig.Prefix %q: want a clean path such as \"/api\", without a trailing slash", p)
	}
	return nil
}

// Mount registers h on mux at the two patterns that reach every route:
// Prefix+"/v1/batch" and Prefix+"/v1/batch/". Like [http.ServeMux.Handle],
// it panics if mux already has either pattern.
func (h *Handler) Mount(mux *http.ServeMux) {
	mux.Handle(h.prefix+RouteList, h)
	mux.Handle(h.prefix+RouteList+"/", h)
}

// ServeHTTP implements [http.Handler]. Paths that are not clean (".", "..",
// "//") are answered 404 rather than redirected, so every answer is JSON.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect || !cleanPath(r.URL.Path) {
		h.other.ServeHTTP(w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

func cleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	return c == p || (c != "/" && c+"/" == p)
}

// byMethod serves one path of the route table: the operation of the
// request's method (HEAD is GET's), or 405 with an Allow header naming the
// path's methods.
func (h *Handler) byMethod(path string) http.Handler {
	ops := map[string]http.Handler{}
	for _, e := range routeTable {
		if e.Path == path {
			ops[e.Method] = h.route(path, func(w http.ResponseWriter, r *http.Request, req *request) error {
				return e.serve(h, w, r, req)
			})
		}
	}
	notAllowed := h.route(path, methodNotAllowed(allowHeader(path)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := r.Method
		if m == http.MethodHead {
			m = http.MethodGet
		}
		if op, ok := ops[m]; ok {
			op.ServeHTTP(w, r)
			return
		}
		notAllowed.ServeHTTP(w, r)
	})
}

func methodNotAllowed(allow string) handlerFunc {
	return func(w http.ResponseWriter, _ *http.Request, _ *request) error {
		w.Header().Set("Allow", allow)
		return &httpError{status: http.StatusMethodNotAllowed, msg: "method not allowed", code: CodeMethodNotAllowed}
	}
}

// handlerFunc serves one route for an authenticated caller. It writes a
// success itself and returns an error for anything else.
type handlerFunc func(w http.ResponseWriter, r *http.Request, req *request) error

// request is what the log line of one request says.
type request struct {
	id        string // the request id, well formed (see ValidRequestID)
	caller    batch.Caller
	jobID     string
	targets   int // -1 if not known
	jobStatus batch.JobStatus
	reused    *bool
	blocked   int // index of the target the pre-check or the option check refused, or -1
	skipped   int // targets a lenient submit skipped
}

// route wraps fn: it authenticates, turns a returned error into its answer,
// recovers a panic, and then logs one line and makes one observation.
func (h *Handler) route(label string, fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := newStatusWriter(w, r)
		req := &request{targets: -1, blocked: -1, id: requestID(w, r)}
		var ans *httpError
		defer func() {
			sw.done()
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				// The panic value may carry anything, a URL included: it is
				// not logged.
				ans = answerFor(errors.New("handler panic"), 0)
				if !sw.wrote {
					writeAnswer(sw, ans)
				}
			}
			status := sw.status
			if !sw.wrote {
				status = statusClientGone
			}
			d := time.Since(start)
			h.logLine(r.Context(), label, status, d, req, ans)
			if h.observe != nil {
				h.observe(label, status, d)
			}
		}()
		caller, ok := h.auth(sw, r)
		if !ok {
			ans = &httpError{status: http.StatusUnauthorized, msg: "unauthorized", code: CodeUnauthorized}
			if !sw.wrote {
				writeAnswer(sw, ans)
			}
			return
		}
		if caller.Name == "" {
			ans = answerFor(batch.ErrInvalidCaller, 0)
			writeAnswer(sw, ans)
			return
		}
		req.caller = caller
		err := fn(sw, r, req)
		if err == nil {
			return
		}
		if _, decided := errors.AsType[*httpError](err); !decided && r.Context().Err() != nil && !sw.wrote {
			return // the client is gone: nothing to answer
		}
		ans = answerFor(err, h.runner.TargetsPerJob())
		if ans.routes {
			ans = ans.under(h.basePath(r))
		}
		writeAnswer(sw, ans)
	})
}

// logLine writes the request's one log line. It never carries a URL, a host
// name, an idem key or the text of a 4xx answer (which may echo input or a
// pre-check reason): only the answer's fixed code. The cause of a 5xx is
// logged for unrestricted callers only.
func (h *Handler) logLine(ctx context.Context, label string, status int, d time.Duration, req *request, ans *httpError) {
	level := slog.LevelDebug // a line per request is for debugging; a busy API writes many
	// A 503 is planned (the store is unreachable, or the runner not
	// running): the runner logs an outage once as it starts and once as
	// it ends, so its requests stay at DEBUG, without their cause (a
	// driver's error may name the database's user, host and port).
	planned := status == http.StatusServiceUnavailable
	if status >= 500 && !planned {
		level = slog.LevelError
	}
	if !h.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs, slog.String("route", label), slog.Int("http_status", status), slog.String("request_id", req.id))
	if req.caller.Name != "" {
		attrs = append(attrs, slog.String("caller", req.caller.Name))
	}
	if req.jobID != "" {
		attrs = append(attrs, slog.String("job_id", req.jobID))
	}
	if req.targets >= 0 {
		attrs = append(attrs, slog.Int("targets", req.targets))
	}
	if req.jobStatus != "" {
		attrs = append(attrs, slog.String("status", string(req.jobStatus)))
	}
	if req.reused != nil {
		attrs = append(attrs, slog.Bool("reused", *req.reused))
	}
	if req.skipped > 0 {
		attrs = append(attrs, slog.Int("skipped", req.skipped))
	}
	if ans != nil && !req.caller.Restricted { // no error details for a restricted caller
		attrs = append(attrs, slog.String("error", ans.code))
		if req.blocked >= 0 {
			attrs = append(attrs, slog.Int("target_idx", req.blocked))
		}
		if status >= 500 && !planned && ans.cause != nil && !req.caller.Restricted {
			attrs = append(attrs, slog.String("cause", ans.cause.Error()))
		}
	}
	attrs = append(attrs, slog.Duration("duration", d))
	h.log.LogAttrs(ctx, level, "batch http", attrs...)
}

// statusWriter records the status written through it, and closes the
// connection after a refusal, or after any answer whose request body was
// not read to its end (see closeUnread).
type statusWriter struct {
	http.ResponseWriter
	status   int
	wrote    bool
	hijacked bool
	body     *bodyWatch // nil: the request has no body
	req      *http.Request
}

// newStatusWriter wraps w, and r's body, so that WriteHeader knows whether
// the body was read to its end. The caller calls done once the handler has
// returned.
func newStatusWriter(w http.ResponseWriter, r *http.Request) *statusWriter {
	sw := &statusWriter{ResponseWriter: w, req: r}
	if r.Body != nil && r.Body != http.NoBody {
		sw.body = &bodyWatch{ReadCloser: r.Body}
		r.Body = sw.body
	}
	return sw
}

// done gives the request its own body back: net/http looks at its type
// once the handler has returned (to close the connection gracefully after
// a body it did not read), and must find its own. A handler that wrote
// nothing gets net/http's empty 200, which closes as any answer does over
// an unread body.
func (w *statusWriter) done() {
	if !w.wrote && !w.hijacked {
		w.closeUnread(http.StatusOK)
	}
	if w.body != nil {
		w.req.Body = w.body.ReadCloser
	}
}

// refusalLinger is how long the connection of an answer whose request
// body was not read still reads what the client has already sent of it
// before it is closed: the bytes in flight, so that closing does not reset
// the connection under an answer the client has not read yet.
const refusalLinger = 250 * time.Millisecond

// closeUnread is called once, before an answer with status code goes out.
// A 401 or 403, and any answer whose request body was not read to its end,
// closes the connection: Connection: close at once, and a near read
// deadline for what follows.
func (w *statusWriter) closeUnread(code int) {
	unread := w.body != nil && !w.body.eof
	if code == http.StatusUnauthorized || code == http.StatusForbidden || unread {
		// Such a body is never read. Without this, net/http would read it
		// (to reuse the connection) before sending the answer, whatever
		// its status, and a client that stalls after its headers would
		// hold the connection with no answer at all.
		w.Header().Set("Connection", "close")
	}
	if unread {
		// And after the answer, net/http reads the rest of the body
		// before it closes the connection: a client that announced a
		// body and stalls would hold the socket until the server's read
		// timeout. A near deadline ends that read.
		_ = http.NewResponseController(w.ResponseWriter).SetReadDeadline(time.Now().Add(refusalLinger))
	}
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
		w.closeUnread(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

// bodyWatch is a request body that records whether it was read to its
// end.
type bodyWatch struct {
	io.ReadCloser
	eof bool
}

func (b *bodyWatch) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
		w.closeUnread(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets [http.ResponseController] reach the server's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

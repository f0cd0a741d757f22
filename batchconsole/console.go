package batchconsole

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
)

// Defaults of [Config].
const (
	DefaultPrefix  = "/console"
	DefaultRefresh = 2 * time.Second
	DefaultJobs    = 50
	// MinKeyBytes is the shortest operator key [New] accepts.
	MinKeyBytes = 16
)

// failureWindow is the window of the failure counts.
const failureWindow = time.Hour

// maxIDBytes bounds a job id in a path: longer ones are not looked up.
const maxIDBytes = 128

//go:embed assets templates
var files embed.FS

var (
	pages  = template.Must(template.New("").Funcs(funcs).ParseFS(files, "templates/*.html"))
	assets = mustSub(files, "assets")
)

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return sub
}

// Config configures a [Handler].
type Config struct {
	// Store is what the console reads. Required.
	Store batchdriver.Inspector
	// Keys are the operator keys, each at least [MinKeyBytes] long. At
	// least one is required.
	Keys []string
	// Prefix is the path the console is served under. Defaults to
	// [DefaultPrefix]; a clean path without a trailing slash.
	Prefix string
	// TTL is the runner's Config.TTL: a job expires at its lease plus TTL.
	// Defaults to batch.DefaultTTL.
	TTL time.Duration
	// StaleAfter is the runner's Config.StaleAfter: a runner whose
	// heartbeat is older is marked stale. Defaults to
	// batch.DefaultStaleAfter.
	StaleAfter time.Duration
	// MaxBytes is the runner's Config.MaxBytes, the byte budget the
	// shares are given against. Defaults to batch.DefaultMaxBytes.
	MaxBytes int64
	// Jobs is how many of the newest jobs, and of the running jobs, the
	// overview lists. Defaults to [DefaultJobs].
	Jobs int
	// Refresh is how often a page updates itself. Defaults to
	// [DefaultRefresh].
	Refresh time.Duration
	// Logger receives a line per failed store read (never a URL: the
	// store's errors do not carry one). Defaults to discarding.
	Logger *slog.Logger
	// Now is the clock of the ages on the pages, and, when set, the Now of
	// the store's reads (a test clock, as batch.Config.Now). Unset, pages
	// use time.Now and the reads the store's own clock, as the runner's
	// do, so that heartbeat ages on a shared store are the database's.
	Now func() time.Time
}

// Handler serves the console. Build one with [New].
type Handler struct {
	opts      Config
	readClock bool // the host gave Config.Now: the reads take it too
	keys      [][sha256.Size]byte
	mux       *http.ServeMux
}

// New returns a console handler.
func New(opts Config) (*Handler, error) {
	if opts.Store == nil {
		return nil, errors.New("batchconsole: Config.Store is required")
	}
	if len(opts.Keys) == 0 {
		return nil, errors.New("batchconsole: at least one operator key is required")
	}
	h := &Handler{}
	for i, k := range opts.Keys {
		if len(k) < MinKeyBytes {
			return nil, fmt.Errorf("batchconsole: operator key %d: shorter than %d bytes", i, MinKeyBytes)
		}
		h.keys = append(h.keys, sha256.Sum256([]byte(k)))
	}
	opts.Prefix = cmp.Or(opts.Prefix, DefaultPrefix)
	if opts.Prefix != path.Clean(opts.Prefix) || !strings.HasPrefix(opts.Prefix, "/") || opts.Prefix == "/" ||
		strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("batchconsole: Config.Prefix %q: want a clean path such as \"/console\", without a trailing slash", opts.Prefix)
	}
	opts.TTL = cmp.Or(opts.TTL, batch.DefaultTTL)
	opts.StaleAfter = cmp.Or(opts.StaleAfter, batch.DefaultStaleAfter)
	opts.MaxBytes = cmp.Or(opts.MaxBytes, batch.DefaultMaxBytes)
	opts.Jobs = cmp.Or(opts.Jobs, DefaultJobs)
	opts.Refresh = cmp.Or(opts.Refresh, DefaultRefresh)
	if opts.TTL < 0 || opts.StaleAfter < 0 || opts.MaxBytes < 0 || opts.Jobs < 0 || opts.Refresh < 0 {
		return nil, errors.New("batchconsole: Config: TTL, StaleAfter, MaxBytes, Jobs and Refresh must not be negative")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h.readClock = opts.Now != nil
	if opts.Now == nil {
		opts.Now = time.Now
	}
	h.opts = opts
	p := opts.Prefix
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+p+"", h.overview)
	mux.HandleFunc("GET "+p+"/{$}", h.overview)
	mux.HandleFunc("GET "+p+"/jobs/{id}", h.job)
	mux.Handle("GET "+p+"/assets/", http.StripPrefix(p+"/assets/", http.FileServerFS(assets)))
	h.mux = mux
	return h, nil
}

// Prefix returns the path the console is served under.
func (h *Handler) Prefix() string { return h.opts.Prefix }

// Mount registers the handler on mux at Prefix and below.
func (h *Handler) Mount(mux *http.ServeMux) {
	mux.Handle(h.opts.Prefix, h)
	mux.Handle(h.opts.Prefix+"/", h)
}

// ServeHTTP authenticates the operator, then serves the console.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	if !h.authorized(r) {
		hd.Set("WWW-Authenticate", `Basic realm="batch console", charset="UTF-8"`)
		h.plain(w, http.StatusUnauthorized, "unauthorized: the console needs an operator key")
		return
	}
	h.mux.ServeHTTP(w, r)
}

// authorized reports whether r carries an operator key, as a bearer token
// or a Basic password. Every key is compared, in constant time.
func (h *Handler) authorized(r *http.Request) bool {
	var secret string
	if _, pass, ok := r.BasicAuth(); ok {
		secret = pass
	} else if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		secret = strings.TrimSpace(tok)
	}
	if secret == "" {
		return false
	}
	d := sha256.Sum256([]byte(secret))
	found := 0
	for _, k := range h.keys {
		found |= subtle.ConstantTimeCompare(d[:], k[:])
	}
	return found == 1
}

// plain writes a short text answer.
func (h *Handler) plain(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprintln(w, msg)
}

// overview serves the console's main page.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	now := h.opts.Now()
	p := batchdriver.OverviewParams{Recent: h.opts.Jobs, Running: h.opts.Jobs, Callers: h.opts.Jobs, FailureWindow: failureWindow}
	if h.readClock {
		p.Now = &now
	}
	ov, err := h.opts.Store.Overview(r.Context(), p)
	if err != nil {
		h.storeError(w, r, "overview", err)
		return
	}
	h.render(w, r, "overview", page{Title: "Batch console", Overview: h.overviewView(ov, now)})
}

// job serves one job's page.
func (h *Handler) job(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == "" || len(id) > maxIDBytes {
		h.plain(w, http.StatusNotFound, "not found")
		return
	}
	j, targets, err := h.opts.Store.InspectJob(r.Context(), id)
	if errors.Is(err, batch.ErrNotFound) {
		h.plain(w, http.StatusNotFound, "not found")
		return
	}
	if err != nil {
		h.storeError(w, r, "inspect job", err)
		return
	}
	now := h.opts.Now()
	v := h.jobView(j, targets, now)
	h.render(w, r, "job", page{Title: "Job " + v.Row.ID, Job: &v})
}

func (h *Handler) storeError(w http.ResponseWriter, r *http.Request, op string, err error) {
	h.opts.Logger.LogAttrs(r.Context(), slog.LevelWarn, "batch console: store read failed",
		slog.String("op", op), slog.String("error", err.Error()))
	h.plain(w, http.StatusServiceUnavailable, "the store cannot be read now; try again")
}

// render writes the page, or with ?fragment=live its live part alone.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, name string, p page) {
	p.Prefix = h.opts.Prefix
	p.Refresh = h.opts.Refresh
	p.Updated = h.opts.Now().UTC().Format("15:04:05 UTC")
	tmpl := name
	if r.URL.Query().Get("fragment") == "live" {
		tmpl = name + "-live"
	}
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, tmpl, p); err != nil {
		h.opts.Logger.LogAttrs(r.Context(), slog.LevelError, "batch console: render failed", slog.String("error", err.Error()))
		h.plain(w, http.StatusInternalServerError, "internal error")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

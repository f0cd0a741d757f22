package batchserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// Limits bound what one client can hold of a host's HTTP server. The zero
// value of each field means its default; the defaults fit the batch API
// (a long-poll or a followed stream lasts up to [batch.MaxWait]).
type Limits struct {
	// MaxConns caps the connections served at once; more wait in the
	// kernel's backlog to be accepted, and when all are open the one idle
	// longest is closed to make room (see [LimitListener]). Defaults to
	// 256, well below a default limit of 1024 open files, which the store
	// and the fetcher's own connections share.
	MaxConns int
	// HeaderTimeout bounds the read of a request's headers. Defaults to 5s.
	HeaderTimeout time.Duration
	// MaxHeaderBytes caps a request's headers: the API needs a few hundred
	// bytes. Defaults to 8 KiB.
	MaxHeaderBytes int
	// ReadTimeout bounds the read of a whole request. Defaults to 30s. (A
	// submit's body has its own, shorter bound: [batchhttp.HandlerConfig].BodyTimeout.)
	ReadTimeout time.Duration
	// WriteTimeout bounds the writing of an answer; it must outlast the
	// longest long-poll. Defaults to [batch.MaxWait] + 30s (90s).
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection that sends nothing.
	// Defaults to 60s.
	IdleTimeout time.Duration
}

// Defaults for [Limits].
const (
	DefaultMaxConns       = 256
	DefaultHeaderTimeout  = 5 * time.Second
	DefaultMaxHeaderBytes = 8 << 10
	DefaultReadTimeout    = 30 * time.Second
	DefaultWriteTimeout   = batch.MaxWait + 30*time.Second
	DefaultIdleTimeout    = 60 * time.Second
)

func (l Limits) withDefaults() Limits {
	l.MaxConns = cmp.Or(l.MaxConns, DefaultMaxConns)
	l.HeaderTimeout = cmp.Or(l.HeaderTimeout, DefaultHeaderTimeout)
	l.MaxHeaderBytes = cmp.Or(l.MaxHeaderBytes, DefaultMaxHeaderBytes)
	l.ReadTimeout = cmp.Or(l.ReadTimeout, DefaultReadTimeout)
	l.WriteTimeout = cmp.Or(l.WriteTimeout, DefaultWriteTimeout)
	l.IdleTimeout = cmp.Or(l.IdleTimeout, DefaultIdleTimeout)
	return l
}

func (l Limits) validate() error {
	if l.MaxConns < 0 || l.HeaderTimeout < 0 || l.MaxHeaderBytes < 0 || l.ReadTimeout < 0 || l.WriteTimeout < 0 || l.IdleTimeout < 0 {
		return errors.New("batchserver: Limits must not be negative")
	}
	if l.WriteTimeout != 0 && l.WriteTimeout <= batch.MaxWait {
		return fmt.Errorf("batchserver: Limits.WriteTimeout %s must exceed the longest long-poll, %s", l.WriteTimeout, batch.MaxWait)
	}
	return nil
}

// Closer is what [Serve] closes first when it shuts down: a
// *batch.Runner.
type Closer interface {
	Close(ctx context.Context) error
}

// ServerConfig configures [Serve].
type ServerConfig struct {
	// Handler serves every request: the host's mux, with the
	// [batchhttp.Handler] mounted on it. Required. Serve wraps it in
	// batchhttp.CloseRefused, so that a refusal by the host's own
	// middleware closes its connection as the Handler's refusals do.
	Handler http.Handler
	// Runner is the batch runner behind Handler. Required.
	Runner Closer
	// Limits are the server's. The zero value is the defaults.
	Limits Limits
	// Logger gets the server's own errors (a TLS handshake, a malformed
	// request) at debug level and one line when shutdown begins. Defaults
	// to discarding them.
	Logger *slog.Logger
	// CloseTimeout bounds Runner.Close at shutdown. Defaults to 10s.
	CloseTimeout time.Duration
	// Grace bounds the wait for requests still in flight once the runner
	// is closed. Defaults to 5s.
	Grace time.Duration
	// AfterShutdown, if set, is called last, once no request is served
	// any more: the place to close the store.
	AfterShutdown func() error
}

// Defaults for [ServerConfig].
const (
	DefaultCloseTimeout = 10 * time.Second
	DefaultGrace        = 5 * time.Second
)

// shutdownSettle is how long, within Grace, [Serve] lets the requests
// that Runner.Close ended finish before it cancels the base context.
const shutdownSettle = 250 * time.Millisecond

// endWait is the least time requests whose context Serve cancelled get to
// return before their connections are closed.
const endWait = time.Second

// Serve serves opts.Handler on ln, within opts.Limits (at most MaxConns
// connections at once, the timeouts on every connection, and
// [batchhttp.CloseRefused] around every request), until ctx is
// done (a signal, say), and then shuts down in the order a batch host
// needs, returning once everything is closed:
//
//  1. Runner.Close, with a context of its own bounded by CloseTimeout (not
//     ctx, which is already done: a runner closed with a done context
//     returns at once and leaves its jobs running until the next start).
//     It stops taking work, cuts in-flight fetches short, fails its own
//     jobs as "restart" and ends long-polls, which answer with the job as
//     it is.
//  2. The server stops accepting, and waits a moment (a quarter of a
//     second, within Grace) for the requests that are ending on their own,
//     such as those long-polls writing their answers.
//  3. The server's base context is cancelled, so that every request still
//     in flight — a followed results stream, a host route waiting on
//     something slow — sees its context done, and the server waits for
//     them up to the rest of Grace (a second at least), then closes what
//     is left.
//  4. AfterShutdown, which closes the store. After a shutdown that went as
//     planned no request can reach it; after one that was forced (the
//     runner's close ran out of CloseTimeout, or requests outlived the
//     grace) a handler that ignores its context may still be running, and
//     the error Serve returns says so.
//
// It returns nil after a shutdown that went as planned, and otherwise the
// errors of the steps that failed, or the server's own error if serving
// stopped by itself. A host that runs its own [http.Server] follows the
// same order (docs/design/http-server.md in the repository says how).
func Serve(ctx context.Context, ln net.Listener, opts ServerConfig) error {
	if opts.Handler == nil || opts.Runner == nil {
		return errors.New("batchserver: Serve needs a Handler and a Runner")
	}
	if err := opts.Limits.validate(); err != nil {
		return err
	}
	if opts.CloseTimeout < 0 || opts.Grace < 0 {
		return errors.New("batchserver: ServerConfig timeouts must not be negative")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := opts.Limits.withDefaults()
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	srv := &http.Server{
		Handler:           batchhttp.CloseRefused(opts.Handler),
		ReadHeaderTimeout: l.HeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	limited := LimitListener(ln, l.MaxConns)
	limited.headerTimeout = l.HeaderTimeout
	srv.ConnState = limited.ConnState
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(limited) }()
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}
	log.LogAttrs(context.Background(), slog.LevelInfo, "shutting down")

	rctx, rcancel := context.WithTimeout(context.Background(), cmp.Or(opts.CloseTimeout, DefaultCloseTimeout))
	defer rcancel()
	runErr := opts.Runner.Close(rctx)
	sctx, scancel := context.WithTimeout(context.Background(), cmp.Or(opts.Grace, DefaultGrace))
	defer scancel()
	// The long-polls the runner's close ended are writing their answers:
	// cancelling the base context at once would cut some of them short (an
	// empty 200). The server stops accepting and waits a moment for them,
	// then cancels the base context for what is left.
	settle, cancelSettle := context.WithTimeout(sctx, shutdownSettle)
	shutErr := srv.Shutdown(settle)
	cancelSettle()
	cancelBase()
	if shutErr != nil {
		// What is left has seen its context end: wait for it for the rest
		// of Grace, and at least a moment, so that it can return.
		deadline, _ := sctx.Deadline()
		ectx, ecancel := context.WithTimeout(context.Background(), max(time.Until(deadline), endWait))
		shutErr = srv.Shutdown(ectx)
		ecancel()
	}
	if shutErr != nil {
		shutErr = errors.Join(fmt.Errorf("batchserver: shutdown: %w", shutErr), srv.Close())
	}
	if serveErr == nil {
		serveErr = <-errc
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	var closeErr error
	if opts.AfterShutdown != nil {
		closeErr = opts.AfterShutdown()
	}
	return errors.Join(serveErr, runErr, shutErr, closeErr)
}

// LimitListener returns ln accepting at most n connections at once: Accept
// waits while n are open, so the kernel's backlog holds the rest (but
// one) rather than each taking a file descriptor. Closing the listener ends a waiting
// Accept with [net.ErrClosed]. [Serve] uses it with Limits.MaxConns; a
// host that runs its own server wraps its listener with it and sets the
// server's ConnState to [LimitedListener.ConnState].
//
// With that hook set, idle connections never keep a client out: when all n
// are open and a client is waiting, Accept closes the connection idle
// longest — kept alive between requests for a quarter of a second, or new
// and silent for a second — and otherwise waits. A connection in use, even
// one idle for a few milliseconds between a client's requests, is kept. So a client that opens many connections and sends nothing on them
// (it needs no key for that) holds none of them once others need the room,
// and a caller's active requests (a long-poll, a stream; capped per caller
// by [batchhttp.HandlerConfig]) are not cut. A connection whose next
// request has begun to arrive is kept for the header timeout
// ([DefaultHeaderTimeout]; [Serve] uses Limits.HeaderTimeout) from its
// first byte; one that has not completed its request by then counts as
// idle, whatever it has read, so that a client cannot hold it by sending a
// few bytes and stopping (net/http waits for the first bytes of a kept-alive
// connection's next request until IdleTimeout). A request that arrives in
// the instant its connection is closed is lost, as at IdleTimeout. An idle
// connection closed so is what a client sees after IdleTimeout: Go's
// client and most others retry an idempotent request on a fresh
// connection.
func LimitListener(ln net.Listener, n int) *LimitedListener {
	return &LimitedListener{
		Listener: ln, slots: make(chan struct{}, max(n, 1)), done: make(chan struct{}),
		conns: map[*limitedConn]struct{}{}, headerTimeout: DefaultHeaderTimeout,
	}
}

// LimitedListener is the listener of [LimitListener].
type LimitedListener struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{} // closed by Close, so that a waiting Accept returns
	closeOnce sync.Once
	// headerTimeout is how long a connection whose request has begun to
	// arrive is kept: the server's ReadHeaderTimeout.
	headerTimeout time.Duration

	mu    sync.Mutex
	conns map[*limitedConn]struct{} // open, and known to the ConnState hook
}

// How long a connection must have been idle before Accept may close it
// (kept alive between requests; new and silent, whose first request, or
// TLS handshake, may still be on its way), and how often Accept looks
// again while none has. A client that uses its connection (a poll every
// few milliseconds, say) keeps it, even while a flood of connections waits
// for room: only what sits unused is closed.
const (
	idleGrace = 250 * time.Millisecond
	newGrace  = time.Second
	idleRetry = 50 * time.Millisecond
)

// Accept accepts a connection once a slot is free. When none is, it
// accepts the next client first and then closes the connection idle
// longest to make room for it, so that an idle connection is closed only
// for a client that is waiting; with none idle, it waits for a slot.
func (l *LimitedListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		return &limitedConn{Conn: c, l: l}, nil
	case <-l.done:
		return nil, net.ErrClosed
	default:
	}
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		select {
		case l.slots <- struct{}{}:
			return &limitedConn{Conn: c, l: l}, nil
		default:
		}
		l.closeIdlest()
		retry := time.NewTimer(idleRetry)
		select {
		case l.slots <- struct{}{}:
			retry.Stop()
			return &limitedConn{Conn: c, l: l}, nil
		case <-l.done:
			retry.Stop()
			c.Close()
			return nil, net.ErrClosed
		case <-retry.C:
		}
	}
}

// closeIdlest closes the open connection that has been idle longest, if
// any has been idle for its grace: idleGrace kept alive between requests,
// newGrace new and silent, and the header timeout from the first byte of
// a request that has begun to arrive.
func (l *LimitedListener) closeIdlest() {
	now := time.Now()
	l.mu.Lock()
	var idlest *limitedConn
	for c := range l.conns {
		if !c.idle || now.Sub(c.since) < cmp.Or(c.fresh, idleGrace) {
			continue // in use, or idle too briefly
		}
		if first := c.firstRead.Load(); first != 0 && now.Sub(time.Unix(0, first)) < l.headerTimeout {
			continue // its next request is arriving, for less than the header timeout
		}
		if idlest == nil || c.since.Before(idlest.since) {
			idlest = c
		}
	}
	if idlest != nil {
		delete(l.conns, idlest)
	}
	l.mu.Unlock()
	if idlest != nil {
		idlest.Close()
	}
}

// ConnState is the hook for [http.Server].ConnState that tells the
// listener which of its connections are idle: new and still silent
// (StateNew) or kept alive between requests (StateIdle). [Serve] sets it.
// A host with a hook of its own calls this one from it.
func (l *LimitedListener) ConnState(c net.Conn, state http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		if nc, isTLS := c.(interface{ NetConn() net.Conn }); isTLS {
			lc, ok = nc.NetConn().(*limitedConn)
		}
	}
	if !ok || lc.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateNew, http.StateIdle:
		if !lc.closed {
			lc.idle, lc.since, lc.fresh = true, time.Now(), 0
			lc.firstRead.Store(0)
			if state == http.StateNew {
				lc.fresh = newGrace
			}
			l.conns[lc] = struct{}{}
		}
	case http.StateActive:
		lc.idle = false
	case http.StateHijacked, http.StateClosed:
		delete(l.conns, lc)
	}
}

// Close closes the listener; a waiting Accept returns [net.ErrClosed].
func (l *LimitedListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitedConn struct {
	net.Conn
	l    *LimitedListener
	once sync.Once
	// Guarded by l.mu.
	idle   bool
	since  time.Time     // when it last became idle
	fresh  time.Duration // newGrace while no request has been read, else 0
	closed bool
	// firstRead is when the first bytes arrived since the connection last
	// became idle (Unix nanoseconds), or 0 if none have: net/http says a
	// connection is active only once a whole request header is read, so a
	// connection that is reading its next request still looks idle.
	firstRead atomic.Int64
}

func (c *limitedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.firstRead.Load() == 0 {
		c.firstRead.CompareAndSwap(0, time.Now().UnixNano())
	}
	return n, err
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.closed = true
		delete(c.l.conns, c)
		c.l.mu.Unlock()
		<-c.l.slots
	})
	return err
}

package pgstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/internal/ablation"
)

// Defaults for [Config].
const (
	DefaultSchema  = "batchkit"
	DefaultTimeout = 30 * time.Second
)

// Config configures a [Store]. The zero value is ready to use.
type Config struct {
	// Schema is the PostgreSQL schema that holds the store's tables; the
	// store creates it if it is missing. Several stores (or batchkit
	// deployments) can share a database, each in a schema of its own.
	// It must be 1 to 48 lower-case letters, digits and underscores,
	// starting with a letter or underscore, and not start with "pg_".
	// Defaults to "batchkit".
	Schema string
	// MaxConns caps the connections of the pool that [Open] makes. [New]
	// ignores it. Defaults to the URL's pool_max_conns, or pgxpool's
	// default: the larger of 4 and the number of CPUs.
	MaxConns int32
	// Timeout bounds every call whose context has no deadline: the wait
	// for a pool connection, for a lock, and for the server. Defaults to
	// 30s.
	Timeout time.Duration
	// Logger receives the change feed's connection problems (the store
	// logs nothing else; it returns its errors). Defaults to discarding
	// them.
	Logger *slog.Logger
}

// maxSchemaLen leaves room in a 63-byte identifier for the change feed's
// channel name, which is the schema plus a suffix.
const maxSchemaLen = 48

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

func (o Config) withDefaults() (Config, error) {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if len(o.Schema) > maxSchemaLen || !schemaRE.MatchString(o.Schema) || strings.HasPrefix(o.Schema, "pg_") {
		errs = append(errs, fmt.Errorf("schema must be 1 to %d lower-case letters, digits and underscores, "+
			"starting with a letter or underscore and not with pg_, got %q", maxSchemaLen, o.Schema))
	}
	if o.MaxConns < 0 {
		errs = append(errs, fmt.Errorf("max conns must not be negative, got %d", o.MaxConns))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout must not be negative, got %s", o.Timeout))
	}
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("pgstore: invalid options: %w", err)
	}
	return o, nil
}

// Store is a [batch.Store] on PostgreSQL that several processes share. It
// is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	own  bool // Open made the pool; Close closes it
	opts Config
	q    queries
	// Advisory lock keys (see lockKey): Create's global cap and the
	// migrations.
	globalKey, migrateKey int64
	// capSlack is the server's max_connections when the store opened: a
	// create takes the shared path only under a cap above it (see
	// create.go), whose insert reads the setting again.
	capSlack int
	// slackForTest, above 0, stands for max_connections in both.
	slackForTest int

	feed  *feed
	group committer // the drain writes' group commit

	// off is what the benchmarks switched off (internal/ablation), read
	// when the store opens.
	off ablation.Off

	closed    atomic.Bool
	closeOnce sync.Once
}

var (
	_ batchdriver.Store      = (*Store)(nil)
	_ batchdriver.ChangeFeed = (*Store)(nil)
)

// Open connects to the database at url (a PostgreSQL URL or key=value
// connection string, as pgxpool.ParseConfig reads it, pool_ settings
// included) with a pool of its own, which it closes at [Store.Close].
// It checks that the server answers and is PostgreSQL 14 or later, and
// applies the embedded migrations to the schema ([Config.Schema]).
func Open(ctx context.Context, url string, opts Config) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: open: %w", err) // pgconn redacts a password
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: open: %w", err)
	}
	return newStore(ctx, pool, opts, true)
}

// New returns a store on a pool the host owns. The pool must outlive the
// store; [Store.Close] does not close it. New runs the same checks and
// migrations as [Open]. The store runs every statement with the pool's
// settings; it never relies on search_path, and sets the isolation level
// of each of its transactions itself.
func New(ctx context.Context, pool *pgxpool.Pool, opts Config) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, errors.New("pgstore: new: nil pool")
	}
	return newStore(ctx, pool, opts, false)
}

func newStore(ctx context.Context, pool *pgxpool.Pool, opts Config, own bool) (*Store, error) {
	off := ablation.Get()
	s := &Store{
		pool:       pool,
		own:        own,
		opts:       opts,
		off:        off,
		q:          sqlTemplates.render(opts.Schema),
		globalKey:  lockKey(opts.Schema, "global"),
		migrateKey: lockKey(opts.Schema, "migrate"),
	}
	s.feed = newFeed(s)
	if err := s.init(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// init checks the server and migrates the schema.
func (s *Store) init(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var version, conns int
	if err := s.pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::integer,
			current_setting('max_connections')::integer`).Scan(&version, &conns); err != nil {
		return s.wrap(ctx, "open", err)
	}
	s.capSlack = conns
	if version < 140000 {
		return fmt.Errorf("%w: PostgreSQL 14 or later is required, the server is %d", ErrSchema, version)
	}
	if err := s.migrate(ctx); err != nil {
		return s.wrap(ctx, "migrate", err)
	}
	return nil
}

// Close stops the change feed and waits for its goroutines, then closes
// the pool that [Open] made, waiting for the calls in flight. It does not
// close a host's pool ([New]). Close is idempotent; calls after it return
// [ErrClosed].
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.feed.close()
		if s.own {
			s.pool.Close()
		}
	})
	return nil
}

// Capabilities implements [batch.Store.Capabilities]: the store is Shared.
// Several runners, on several nodes, drain it at once; a starting runner
// fails only its own and stale runners' jobs.
func (s *Store) Capabilities() batchdriver.Capabilities {
	return batchdriver.Capabilities{Shared: true}
}

// bound gives ctx the store's default deadline if it has none.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.opts.Timeout)
}

// begin starts a call: it refuses a closed store and bounds ctx.
func (s *Store) begin(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if s.closed.Load() {
		return ctx, func() {}, ErrClosed
	}
	ctx, cancel := s.bound(ctx)
	return ctx, cancel, nil
}

// wrap translates an error of operation op (see wrapErr).
func (s *Store) wrap(ctx context.Context, op string, err error) error {
	return wrapErr(ctx, op, err, s.closed.Load())
}

// now is the clock argument of a statement: the call's Now if it has one,
// else NULL, the transaction's now() (see The clock in the package
// documentation).
func (s *Store) now(t *time.Time) any {
	if t != nil {
		return *t
	}
	return nil
}

// timeBound returns the arguments of the bound "older than age at the
// call's Now": the bound itself, Now minus age, for a call with a Now,
// else the age to take from the database's now().
func (s *Store) timeBound(now *time.Time, age time.Duration) (abs, ageArg any) {
	if now != nil {
		return now.Add(-age), nil
	}
	return nil, age
}

// lockKey is the advisory lock key of one of the store's locks: a 64-bit
// FNV-1a hash of the schema and the lock's name. Advisory locks are
// per database, hence the schema. The keys must never change: nodes of two
// versions lock the same keys.
func lockKey(schema, name string) int64 {
	h := fnv.New64a()
	h.Write([]byte("batchkit\x00" + schema + "\x00" + name))
	return int64(h.Sum64())
}

// callerKey is the advisory lock key of one caller's creates.
func (s *Store) callerKey(caller string) int64 { return lockKey(s.opts.Schema, "caller\x00"+caller) }

// rollback ends a transaction that did not commit, on a context of its own
// (the call's may be done), so that the connection goes back to the pool
// outside any transaction. A connection it cannot roll back is closed.
func rollback(conn *pgxpool.Conn) {
	if conn.Conn().PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		conn.Conn().Close(ctx)
	}
}

// txIdleTimeout is how long the server lets a transaction of the store
// that spans round trips wait on the store before it ends the session.
// Only a client that stopped mid-transaction waits that long: a frozen
// process, or a node cut off from the network. Without the bound its
// locks (a caller's, the byte counter's rows) would outlive it until its
// TCP connection died, and the creates, releases and reaps of every node
// would wait for them.
const txIdleTimeout = 5 * time.Second

// beginTx starts a READ COMMITTED transaction, and boundTx bounds it by
// txIdleTimeout. A transaction whose statements all travel in one
// pipeline never waits on the store and needs no bound. beginBoundTx is
// both, inTx's first round trip.
const beginTx = `BEGIN ISOLATION LEVEL READ COMMITTED`

var (
	// idleBound is txIdleTimeout as the server's settings take it.
	idleBound    = strconv.FormatInt(txIdleTimeout.Milliseconds(), 10)
	boundTx      = "SET LOCAL idle_in_transaction_session_timeout = " + idleBound
	beginBoundTx = beginTx + "; " + boundTx
	beginReadTx  = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; " + boundTx
)

// inTx runs fn in a READ COMMITTED transaction on one connection, bounded
// by txIdleTimeout, and commits it. READ COMMITTED is set explicitly,
// whatever the server's default: each statement then sees what committed
// before it started, which the advisory locks and row locks of the
// store's transactions rely on.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{BeginQuery: beginBoundTx}, fn)
}

// readTx runs fn in a read-only REPEATABLE READ transaction on one
// connection, bounded by txIdleTimeout: one snapshot over several round
// trips. Unbounded, a client that stopped inside it would keep its
// snapshot, which holds vacuum back, and its tables' share locks, which a
// migration's DDL waits for while every later call waits behind the DDL.
func (s *Store) readTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{BeginQuery: beginReadTx}, fn)
}

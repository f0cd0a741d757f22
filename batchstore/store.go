package batchstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/internal/ablation"
)

// Defaults for [Config].
const (
	DefaultPoolSize = 8
	DefaultTimeout  = 30 * time.Second
)

// journalSizeLimit is the size the WAL file is truncated back to after a
// checkpoint resets it: the WAL overhead on disk at rest (see "File size"
// in docs/design/sqlite-store.md in the repository).
const journalSizeLimit = 4 << 20

// Synchronous is SQLite's synchronous setting for the store's connections:
// how hard a commit works to survive a crash. See the package documentation.
type Synchronous string

// The synchronous settings the store accepts.
const (
	// SyncFull syncs the WAL at every commit: a commit that returned
	// survives a process crash and a power loss or OS crash.
	SyncFull Synchronous = "FULL"
	// SyncNormal syncs only at checkpoints: a commit that returned survives
	// a process crash, but a power loss or OS crash may roll back the
	// commits since the last checkpoint (never corrupting the file).
	SyncNormal Synchronous = "NORMAL"
)

// Config configures a [Store]. The zero value is ready to use.
type Config struct {
	// Synchronous is the durability of a commit. Defaults to SyncFull.
	Synchronous Synchronous
	// PoolSize is how many connections [Open] opens: one the store keeps
	// for its writes, the rest for WAL readers, which run in parallel (of
	// a pool of 5 or more, the store keeps up to 2 readers for the point
	// reads of status polls). It must be at least 2. [New] ignores it.
	// Defaults to 8.
	PoolSize int
	// Timeout bounds every call whose context has no deadline: the wait for
	// a connection and for the write lock. Defaults to 30s.
	Timeout time.Duration
}

func (o Config) withDefaults() (Config, error) {
	if o.Synchronous == "" {
		o.Synchronous = SyncFull
	}
	if o.PoolSize == 0 {
		o.PoolSize = DefaultPoolSize
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	var errs []error
	if s := Synchronous(strings.ToUpper(string(o.Synchronous))); s != SyncFull && s != SyncNormal {
		errs = append(errs, fmt.Errorf("synchronous must be FULL or NORMAL, got %q", o.Synchronous))
	} else {
		o.Synchronous = s
	}
	if o.PoolSize < 2 {
		errs = append(errs, fmt.Errorf("pool size must be at least 2 (a writer and a reader), got %d", o.PoolSize))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout must not be negative, got %s", o.Timeout))
	}
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("batchstore: invalid options: %w", err)
	}
	return o, nil
}

// Pool is a pool of SQLite connections owned by the host, as [New] takes it.
// *sqlitex.Pool and *sqlitemigration.Pool satisfy it. Every connection Take
// returns must be used by one goroutine at a time and given back with Put.
type Pool interface {
	Take(ctx context.Context) (*sqlite.Conn, error)
	Put(conn *sqlite.Conn)
}

// Store is a [batch.Store] on SQLite. It is safe for concurrent use.
type Store struct {
	pool Pool
	own  *sqlitex.Pool // the pool Open made; nil for New
	lock *os.File      // the sidecar flock; nil without a file
	opts Config

	// The writer (see writer.go): one goroutine runs every write
	// transaction of the store, on wconn, in arrival order.
	writeq     chan *writeReq
	stopWriter chan struct{} // closed by Close
	writerDone chan struct{} // closed when the goroutine has returned
	wconn      *sqlite.Conn
	wdone      chan struct{} // wconn's interrupt channel
	handing    atomic.Int64  // writes handed to writeq and not yet taken by the writer
	// The background checkpointer (see checkpoint.go): walPages counts the
	// writer's pages since the last signal, ckpt signals it, ckptDone is
	// closed when it ends. Only the writer goroutine touches them, and Close
	// once it has ended.
	walPages int
	ckpt     chan struct{}
	ckptDone chan struct{}
	ckptMu   sync.Mutex // held while a checkpoint runs

	// The quick readers (see quick.go), for point reads: free ones wait in
	// quick.
	quick  chan *sqlite.Conn
	nquick int

	// off is what the benchmarks switched off (internal/ablation), read
	// when the store opens.
	off ablation.Off

	prepared  sync.Map // *sqlite.Conn of a host pool → struct{}: settings applied
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ batchdriver.Store = (*Store)(nil)

// Open opens (creating if needed) the store in the SQLite file at path, and
// owns its connection pool until [Store.Close]. path may also be an SQLite
// URI ("file:…"); a shared-cache memory URI works for tests.
//
// Before it touches the database, Open locks the sidecar file path+".lock":
// a second store on the same file, in this process or another, gets
// [ErrLocked]. It then runs PRAGMA quick_check ([ErrCorrupt] for a damaged
// file or one that is not a database, left byte for byte as it was), applies
// the embedded migrations, and checks that the file can be written
// ([ErrReadOnly]). It refuses an existing database file (or -wal or -shm
// file) that users other than its owner and group may read: new files are
// created 0600.
func Open(ctx context.Context, path string, opts Config) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{opts: opts, off: ablation.Get()}
	if readOnlyURI(path) {
		// Refused before SQLite runs: a read-only connection to a WAL file
		// would leave -wal and -shm files behind that it cannot remove.
		return nil, fmt.Errorf("%w: open %s: the URI asks for mode=ro", ErrReadOnly, path)
	}
	if name := fileOf(path); name != "" {
		if s.lock, err = lockFile(name + ".lock"); err != nil {
			return nil, s.openErr(ctx, path, err)
		}
		if err := createPrivate(name); err != nil {
			return nil, s.openErr(ctx, path, err)
		}
		if err := checkNotWorldReadable(name); err != nil {
			return nil, s.openErr(ctx, path, err)
		}
	}
	// No OpenWAL: the pool must not write the file (journal_mode) before
	// quick_check has vouched for it. init switches to WAL afterwards.
	s.own, err = sqlitex.NewPool(path, sqlitex.PoolOptions{
		Flags:       sqlite.OpenReadWrite | sqlite.OpenCreate | sqlite.OpenURI,
		PoolSize:    opts.PoolSize,
		PrepareConn: s.prepareConn,
	})
	if err != nil {
		return nil, s.openErr(ctx, path, err)
	}
	s.pool = s.own
	if err := s.init(ctx); err != nil {
		return nil, s.openErr(ctx, path, err)
	}
	bctx, cancel := s.bound(ctx)
	defer cancel()
	n := quickReaders(opts.PoolSize)
	if s.off.SQLiteQuickReaders {
		n = 0
	}
	if err := s.startQuick(bctx, n); err != nil {
		return nil, s.openErr(ctx, path, err)
	}
	return s, nil
}

// New returns a store on a connection pool the host owns, for a host that
// keeps its own tables in the same file. The pool must outlive the store;
// [Store.Close] does not close it. The store keeps one of the pool's
// connections for its writes from New until Close, so the pool needs at
// least two. New runs the same checks and migrations
// as [Open], and locks the sidecar of the pool's main database file.
//
// The first time the store takes each connection it sets PRAGMA
// foreign_keys = ON, synchronous (see [Config]) and journal_size_limit on
// it; these stay on the connection, so the host's own use of it sees them
// too. (A host that sets them in its pool's PrepareConn loses nothing: the
// store applies the same values.)
func New(ctx context.Context, pool Pool, opts Config) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, errors.New("batchstore: new: nil pool")
	}
	s := &Store{pool: pool, opts: opts, off: ablation.Get()}
	name, err := s.mainFile(ctx)
	if err != nil {
		return nil, s.openErr(ctx, "pool", err)
	}
	if name != "" {
		if s.lock, err = lockFile(name + ".lock"); err != nil {
			return nil, s.openErr(ctx, name, err)
		}
	}
	if err := s.init(ctx); err != nil {
		return nil, s.openErr(ctx, cmp.Or(name, "in-memory database"), err)
	}
	return s, nil
}

// openErr undoes a failed Open or New and returns its error.
func (s *Store) openErr(ctx context.Context, path string, err error) error {
	s.Close()
	return wrapErr(ctx, "open "+path, err)
}

// Close lets the write in flight commit, cuts short the reads in flight
// but point reads (they return [ErrClosed]), closes the pool that [Open] made once every
// connection is back, and releases the file lock. It does not close a
// host's pool ([New]). Close is idempotent; calls after it return
// [ErrClosed].
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.stopWriting() // the write in flight, if any, ends first
		s.stopQuick()
		if s.own != nil {
			s.closeErr = s.own.Close()
		}
		if err := unlockFile(s.lock); s.closeErr == nil {
			s.closeErr = err
		}
		if s.closeErr != nil {
			s.closeErr = fmt.Errorf("batchstore: close: %w", s.closeErr)
		}
	})
	return s.closeErr
}

// createPrivate creates the database file, empty, readable and writable by
// its owner only, if it does not exist yet: SQLite would create it 0644
// (less the umask), and it creates the -wal and -shm files with the
// database file's mode. An existing file keeps its mode.
func createPrivate(name string) error {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// checkNotWorldReadable refuses a database file, or a -wal or -shm file
// beside it, that users other than its owner and group may read or write:
// it holds every caller's results. createPrivate makes new files 0600 (and
// SQLite gives -wal and -shm the database's mode), but an existing file
// keeps its mode, and a file from before that, or copied in, is often 0644.
// Group access is left to the operator, for a backup group say.
func checkNotWorldReadable(name string) error {
	for _, f := range []string{name, name + "-wal", name + "-shm"} {
		fi, err := os.Stat(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if perm := fi.Mode().Perm(); perm&0o007 != 0 {
			return fmt.Errorf("%s: permissions %04o are too open: other users could read the stored results; chmod o-rwx %s", f, perm, f)
		}
	}
	return nil
}

// fileOf returns the file a path or "file:" URI names, or "" for an
// in-memory database.
func fileOf(path string) string {
	if path == "" || path == ":memory:" {
		return ""
	}
	if !strings.HasPrefix(path, "file:") {
		return path
	}
	u, err := url.Parse(path)
	if err != nil {
		return path
	}
	if u.Query().Get("mode") == "memory" {
		return ""
	}
	name := u.Path
	if name == "" {
		name = u.Opaque
	}
	if name == "" || name == ":memory:" {
		return ""
	}
	return name
}

// readOnlyURI reports whether path is a "file:" URI with mode=ro.
func readOnlyURI(path string) bool {
	if !strings.HasPrefix(path, "file:") {
		return false
	}
	u, err := url.Parse(path)
	return err == nil && u.Query().Get("mode") == "ro"
}

// mainFile returns the file of the pool's main database, or "".
func (s *Store) mainFile(ctx context.Context) (string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	conn, err := s.pool.Take(ctx)
	if err != nil {
		return "", err
	}
	defer s.pool.Put(conn)
	var name string
	err = sqlitex.ExecuteTransient(conn, "PRAGMA database_list", &sqlitex.ExecOptions{
		ResultFunc: func(stmt *sqlite.Stmt) error {
			if stmt.ColumnText(1) == "main" {
				name = stmt.ColumnText(2)
			}
			return nil
		},
	})
	return name, err
}

// prepareConn applies the per-connection settings. Pragmas are run one by
// one, outside any transaction: inside one, synchronous fails and
// foreign_keys is silently ignored.
func (s *Store) prepareConn(conn *sqlite.Conn) error {
	if !conn.AutocommitEnabled() {
		return errors.New("batchstore: pool connection is inside a transaction")
	}
	for _, q := range []string{
		"PRAGMA foreign_keys = ON",
		"PRAGMA synchronous = " + string(s.opts.Synchronous),
		fmt.Sprintf("PRAGMA journal_size_limit = %d", journalSizeLimit),
	} {
		if err := sqlitex.ExecuteTransient(conn, q, nil); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// bound gives ctx the store's default deadline if it has none, so that no
// pool take or lock wait can block forever.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.opts.Timeout)
}

// take takes a connection, prepared, tied to ctx until it is put back.
func (s *Store) take(ctx context.Context) (*sqlite.Conn, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil { // Take may still hand out a conn
		return nil, err
	}
	conn, err := s.pool.Take(ctx)
	if err != nil {
		if s.closed.Load() {
			return nil, ErrClosed
		}
		return nil, err
	}
	if s.own == nil {
		if _, ok := s.prepared.Load(conn); !ok {
			if err := s.prepareConn(conn); err != nil {
				s.pool.Put(conn)
				return nil, err
			}
			s.prepared.Store(conn, struct{}{})
		}
	}
	return conn, nil
}

// read runs fn on a connection outside any explicit transaction; each of
// its statements reads one consistent snapshot.
func (s *Store) read(ctx context.Context, op string, fn func(*sqlite.Conn) error) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	conn, err := s.take(ctx)
	if err != nil {
		return wrapErr(ctx, op, err)
	}
	defer s.pool.Put(conn)
	err = fn(conn)
	if err != nil && s.closed.Load() { // the pool's Close interrupted it
		return ErrClosed
	}
	return wrapErr(ctx, op, err)
}

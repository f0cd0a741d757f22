package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"
)

// ServeChild is the child half of the tests that kill a daemon process:
// such a test re-executes its own binary, which opens a daemon on cfg,
// listens on a free loopback port, writes "listening <addr>" to stdout
// once it serves, and serves until ctx ends (SIGTERM, for a graceful stop)
// or the process is killed. It returns the process's exit status: 0 after
// a graceful stop, 3 if the daemon could not open or listen (the reason on
// stdout, so that the parent sees it in place of the address), 4 if
// serving failed (the reason on stderr).
func ServeChild(ctx context.Context, cfg Config, stdout, stderr io.Writer) int {
	d, err := Open(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stdout, "open-error", err)
		return 3
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		d.Close(ctx)
		fmt.Fprintln(stdout, "listen-error", err)
		return 3
	}
	fmt.Fprintln(stdout, "listening", ln.Addr())
	if err := d.Serve(ctx, ln, 5*time.Second); err != nil {
		fmt.Fprintln(stderr, "serve:", err)
		return 4
	}
	return 0
}

// Command demo runs batchkit's main job end to end on one machine: it starts
// the example daemon in process on the embedded SQLite store, serves a few
// local pages, submits them as one batch with the CLI client, follows the
// job's progress and prints the results.
//
//	go run ./examples/demo
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batchcli"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
	"github.com/siftfetch/batchkit/examples/internal/daemon"
)

func main() {
	if err := run(context.Background(), os.Stdout, os.Stderr, 200*time.Millisecond); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// site serves the pages the demo fetches; each takes delay to answer.
func site(delay time.Duration) http.Handler {
	mux := http.NewServeMux()
	page := func(path, contentType, body string) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(delay)
			w.Header().Set("Content-Type", contentType)
			io.WriteString(w, body)
		})
	}
	page("/articles/batching", "text/html; charset=utf-8", `<html><head><title>Batching</title><style>p{}</style></head>
<body><h1>Why batch?</h1><p>An agent with twenty URLs should not hold twenty requests open.</p>
<script>tracker()</script><p>It submits them once and walks away.</p></body></html>`)
	page("/notes.txt", "text/plain; charset=utf-8", "leases slide on every read\nbudgets evict the oldest jobs\nrestarts fail, never resume\n")
	page("/changelog", "text/plain; charset=utf-8", "v0.1 first cut\nv0.2 sqlite store\nv0.3 http api\n")
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		http.NotFound(w, r)
	})
	return mux
}

func run(ctx context.Context, stdout, stderr io.Writer, delay time.Duration) error {
	dir, err := os.MkdirTemp("", "batchkit-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// The local site. The daemon's SSRF guard refuses loopback addresses, so
	// the demo allow-lists exactly this one.
	pages, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	pageSrv := &http.Server{Handler: site(delay), ReadHeaderTimeout: 5 * time.Second}
	go pageSrv.Serve(pages)
	defer pageSrv.Close()

	// The daemon, on the embedded SQLite default.
	const key = "demo-secret"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	d, err := daemon.Open(ctx, daemon.Config{
		DB:     filepath.Join(dir, "batchkit.db"),
		Keys:   []batchserver.Key{{Name: "demo-agent", Secret: key}},
		Allow:  []string{pages.Addr().String()},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		ln.Close()
		return err
	}
	serveCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- d.Serve(serveCtx, ln, 10*time.Second) }()
	defer func() {
		stop()
		<-served
	}()
	server := "http://" + ln.Addr().String()
	base := "http://" + pages.Addr().String()
	fmt.Fprintf(stdout, "batchd is serving on %s (SQLite database in %s)\n\n", server, dir)

	client, err := batchhttp.NewClient(server, key, &http.Client{Timeout: 2 * time.Minute})
	if err != nil {
		return err
	}
	targets := strings.Join([]string{
		`{"url":"` + base + `/articles/batching","mode":"clean"}`,
		`{"url":"` + base + `/notes.txt","mode":"raw","grep":"evict|resume"}`,
		`{"url":"` + base + `/changelog"}`,
		`{"url":"` + base + `/missing"}`,
		`{"url":"` + base + `/notes.txt","jq":".x"}`,
	}, ",\n  ")
	input := "{\"targets\": [\n  " + targets + "\n]}\n"
	var out strings.Builder
	cli := batchcli.New(batchcli.Config{Client: client, Options: batchsift.Options, Stdin: strings.NewReader(input), Stdout: &out, Stderr: stdout, PollWait: 5 * time.Second})

	step := func(title string, args ...string) (string, error) {
		out.Reset()
		fmt.Fprintf(stdout, "$ batch %s\n", strings.Join(args, " "))
		err := cli.Run(ctx, args)
		fmt.Fprintf(stdout, "%s\n", out.String())
		return out.String(), err
	}
	fmt.Fprintf(stdout, "targets.json:\n%s\n", input)
	body, err := step("submit", "submit", "-")
	if err != nil {
		return err
	}
	id := between(body, `"job_id": "`, `"`)
	if id == "" {
		return errors.New("no job id in the submit answer")
	}
	// The job ends partial on purpose: --wait says so with its exit code.
	if _, err := step("status", "status", id, "--wait", "--results"); batchcli.ExitCode(err) != batchcli.ExitJobNotDone {
		return fmt.Errorf("status --wait: exit code %d, want %d (partial): %w", batchcli.ExitCode(err), batchcli.ExitJobNotDone, err)
	}
	if _, err := step("result", "result", id, "1"); err != nil {
		return err
	}
	_, err = step("list", "list")
	return err
}

// between returns the text of s between the first before and the next after.
func between(s, before, after string) string {
	_, rest, ok := strings.Cut(s, before)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, after)
	return v
}

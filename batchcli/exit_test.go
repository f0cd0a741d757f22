package batchcli_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchcli"
	"github.com/siftfetch/batchkit/batchhttp"
)

// result is what one run of the CLI left behind.
type result struct {
	stdout, stderr string
	code           int
	err            error
}

// runCLI runs one command against the server at url with key, as a
// non-terminal, over hc (nil: the default client).
func runCLI(t *testing.T, ctx context.Context, url, key string, hc *http.Client, stdin string, args ...string) result {
	t.Helper()
	client, err := batchhttp.NewClient(url, key, hc)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	cli := batchcli.New(batchcli.Config{
		Client: client, Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr,
		IsTerminal: func(io.Writer) bool { return false }, PollWait: time.Second,
	})
	err = cli.Run(ctx, args)
	if err != nil && !errors.Is(err, batchcli.ErrReported) {
		t.Errorf("%q: error %v is not marked reported", args, err)
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: batchcli.ExitCode(err), err: err}
}

// check fails the test unless r has exit code want and its stderr holds
// every one of msgs.
func (r result) check(t *testing.T, name string, want int, msgs ...string) {
	t.Helper()
	if r.code != want {
		t.Errorf("%s: exit code %d, want %d (error %v, stderr %q)", name, r.code, want, r.err, r.stderr)
	}
	for _, m := range msgs {
		if !strings.Contains(r.stderr, m) {
			t.Errorf("%s: stderr %q lacks %q", name, r.stderr, m)
		}
	}
}

func submit(t *testing.T, url, stdin string) string {
	t.Helper()
	r := runCLI(t, t.Context(), url, "alice-key", nil, stdin, "submit", "-")
	r.check(t, "submit", batchcli.ExitOK)
	return decode[batchhttp.SubmitResponse](t, []byte(r.stdout)).JobID
}

func TestCLI_ExitCodes(t *testing.T) {
	t.Parallel()
	t.Run("Interrupted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "", false)
		id := submit(t, b.url, "https://a.test/1\nhttps://a.test/2\n")
		<-b.fetch.Started
		ctx, cancel := context.WithCancel(t.Context())
		stderr := &firstWrite{ch: make(chan struct{})}
		client, err := batchhttp.NewClient(b.url, "alice-key", nil)
		if err != nil {
			t.Fatal(err)
		}
		cli := batchcli.New(batchcli.Config{Client: client, Stdout: io.Discard, Stderr: stderr, PollWait: time.Minute})
		done := make(chan error, 1)
		go func() { done <- cli.Run(ctx, []string{"status", id, "--wait"}) }()
		<-stderr.ch // the first progress line: --wait is now in a long-poll
		cancel()
		err = <-done
		if code := batchcli.ExitCode(err); code != batchcli.ExitInterrupted {
			t.Errorf("exit code %d, want %d (%v)", code, batchcli.ExitInterrupted, err)
		}
		out := stderr.String()
		want := "batch: interrupted; stopped waiting; the job goes on (batch cancel " + id + " stops it)\n"
		if !strings.HasSuffix(out, want) || strings.Contains(out, "context canceled") {
			t.Errorf("stderr %q, want it to end %q and carry no raw error", out, want)
		}
		// Ctrl-C stops the waiting, not the job.
		st, err := b.runner.Status(t.Context(), batch.Caller{Name: "alice"}, id, batch.StatusOptions{})
		if err != nil || st.Status != batch.JobRunning {
			t.Errorf("job after the interrupt: %v, %v; want running", st.Status, err)
		}
		b.fetch.Release()
		b.fetch.Release()
	})
	t.Run("JobNotDone", func(t *testing.T) {
		t.Parallel()
		_, url := serve(t, batchtest.ScriptFetcher(map[string]batchtest.Step{"https://a.test/bad": {Err: batchtest.ErrScripted}}))
		id := submit(t, url, "https://a.test/ok\nhttps://a.test/bad\n")
		r := runCLI(t, t.Context(), url, "alice-key", nil, "", "status", id, "--wait")
		r.check(t, "partial", batchcli.ExitJobNotDone, "batch: job ended partial: 1 of 2 targets failed")
		if st := decode[batchhttp.StatusResponse](t, []byte(r.stdout)); st.Status != batch.JobPartial {
			t.Errorf("partial: printed %+v", st)
		}
		// Without --wait, a status read that worked is a success.
		runCLI(t, t.Context(), url, "alice-key", nil, "", "status", id).check(t, "status of a partial job", batchcli.ExitOK)

		_, url = serve(t, batchtest.FailingFetcher(batchtest.ErrScripted))
		id = submit(t, url, "https://a.test/1\nhttps://a.test/2\n")
		r = runCLI(t, t.Context(), url, "alice-key", nil, "", "status", id, "--wait", "--results")
		r.check(t, "failed", batchcli.ExitJobNotDone, "batch: job failed: 2 of 2 targets failed")

		b := setup(t, "", false)
		id = submit(t, b.url, "https://a.test/1\nhttps://a.test/2\n")
		<-b.fetch.Started
		runCLI(t, t.Context(), b.url, "alice-key", nil, "", "cancel", id).check(t, "cancel", batchcli.ExitOK)
		b.fetch.Release()
		r = runCLI(t, t.Context(), b.url, "alice-key", nil, "", "status", id, "--wait")
		r.check(t, "cancelled", batchcli.ExitJobNotDone, "batch: job was cancelled: ")

		_, url = serve(t, nil)
		id = submit(t, url, "https://a.test/1\n")
		runCLI(t, t.Context(), url, "alice-key", nil, "", "status", id, "--wait").check(t, "done", batchcli.ExitOK)
	})
	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "", false)
		id := submit(t, b.url, "https://a.test/1\n")
		b.fetch.Release()
		runCLI(t, t.Context(), b.url, "alice-key", nil, "", "status", id, "--wait").check(t, "wait", batchcli.ExitOK)
		runCLI(t, t.Context(), b.url, "alice-key", nil, "", "cancel", id).
			check(t, "cancel of a done job", batchcli.ExitRefused, "batch: job already finished (HTTP 409)")
		runCLI(t, t.Context(), b.url, "bob-key", nil, "", "status", id).
			check(t, "another caller's job", batchcli.ExitRefused, "batch: not found (HTTP 404)")
		runCLI(t, t.Context(), b.url, "wrong-key", nil, "", "list").
			check(t, "wrong key", batchcli.ExitRefused, "batch: unauthorized (HTTP 401)\nhint: "+batchcli.DefaultKeyHint+"\n")
		runCLI(t, t.Context(), b.url, "", nil, "", "list").
			check(t, "no key", batchcli.ExitRefused, "batch: unauthorized (HTTP 401)\nhint: "+batchcli.DefaultKeyHint+"\n")
		many := make([]string, 33)
		for i := range many {
			many[i] = "https://a.test/" + strings.Repeat("x", i+1)
		}
		runCLI(t, t.Context(), b.url, "alice-key", nil, strings.Join(many, "\n"), "submit", "-").
			check(t, "33 targets", batchcli.ExitRefused, "too many targets (max 32) (HTTP 422)")
		runCLI(t, t.Context(), b.url, "alice-key", nil, `[{"url":""}]`, "submit", "-").
			check(t, "empty url", batchcli.ExitRefused, "(HTTP 400)")
		// Refused by the CLI itself, before sending, as the server would.
		r := runCLI(t, t.Context(), b.url, "alice-key", nil, `{"targets":[{"URL":"https://a.test/"}]}`, "submit", "-")
		r.check(t, "case-folded field", batchcli.ExitRefused, `batch: invalid targets: target 0: unknown field "URL"`)
		runCLI(t, t.Context(), b.url, "alice-key", nil, "not a url list\n", "submit", "-").
			check(t, "bad input", batchcli.ExitRefused, "not a single URL")
	})
	t.Run("ServerError", func(t *testing.T) {
		t.Parallel()
		unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// The wire's error shape, written by hand: what the CLI reads of
			// it does not depend on the server's helper.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"success":false,"error":"store unavailable"}`)
		}))
		t.Cleanup(unavailable.Close)
		runCLI(t, t.Context(), unavailable.URL, "k", nil, "", "status", "x").
			check(t, "503", batchcli.ExitServerError, "batch: store unavailable (HTTP 503)")

		garbled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "<html>a proxy's page</html>")
		}))
		t.Cleanup(garbled.Close)
		runCLI(t, t.Context(), garbled.URL, "k", nil, "", "list").check(t, "not JSON", batchcli.ExitServerError, "decode answer")

		// Nothing listens on port 1 (a port just closed could be taken by
		// another test's listener).
		const gone = "http://127.0.0.1:1"
		r := runCLI(t, t.Context(), gone, "k", nil, "", "status", "job-1")
		r.check(t, "connection refused", batchcli.ExitServerError, "batch: no answer from "+gone+": ", "connection refused")
		if strings.Contains(r.stderr, "job-1") || strings.Contains(r.stderr, "/v1/batch") {
			t.Errorf("connection refused: stderr %q carries the request's path", r.stderr)
		}

		release := make(chan struct{})
		hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}))
		t.Cleanup(func() { close(release); hanging.Close() })
		runCLI(t, t.Context(), hanging.URL, "k", &http.Client{Timeout: 50 * time.Millisecond}, "", "list").
			check(t, "timeout", batchcli.ExitServerError, "batch: no answer from "+hanging.URL+" in time")
	})
	t.Run("Usage", func(t *testing.T) {
		t.Parallel()
		_, url := serve(t, nil)
		runCLI(t, t.Context(), url, "alice-key", nil, "", "status").
			check(t, "missing id", batchcli.ExitUsage, "batch: status: missing <id>")
		missing := filepath.Join(t.TempDir(), "missing.json")
		runCLI(t, t.Context(), url, "alice-key", nil, "", "submit", missing).
			check(t, "missing file", batchcli.ExitUsage, "batch: submit: cannot read "+missing+": no such file or directory")
	})
}

// firstWrite collects what is written to it and closes ch at the first
// write.
type firstWrite struct {
	mu   sync.Mutex
	buf  strings.Builder
	ch   chan struct{}
	once sync.Once
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.once.Do(func() { close(w.ch) })
	return w.buf.Write(p)
}

func (w *firstWrite) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// A 401 tells the user how to pass the key to this CLI (the host's words),
// not how to send an HTTP header.
func TestCLI_KeyHint(t *testing.T) {
	t.Parallel()
	_, url := serve(t, nil)
	client, err := batchhttp.NewClient(url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cli := batchcli.New(batchcli.Config{Client: client, Stdout: io.Discard, Stderr: &stderr, KeyHint: "run: sift login"})
	err = cli.Run(t.Context(), []string{"list"})
	if want := "batch: unauthorized (HTTP 401)\nhint: run: sift login\n"; batchcli.ExitCode(err) != batchcli.ExitRefused || stderr.String() != want {
		t.Errorf("exit %d, stderr %q; want 1, %q", batchcli.ExitCode(err), stderr.String(), want)
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchcli"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
	"github.com/siftfetch/batchkit/batchstore"
	"github.com/siftfetch/batchkit/examples/internal/testbin"
)

// raceEnabled is set when the test binary is built with -race, so the daemon
// binary is built the same way and reuses the build cache.
var raceEnabled bool

func TestParseFlags(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"-addr", "127.0.0.1:0", "-key", "a=b", "-key", "c=d:restricted", "-allow", "127.0.0.1:81",
		"-workers", "3", "-ttl", "2h", "-max-bytes", "1000",
		"-webhook-secret-file", "/etc/hook", "-webhook-timeout", "3s", "-webhook-backoff", "1s", "-webhook-retry-for", "6h",
		"-webhook-legacy-signature", "-max-deadline", "90s"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.addr != "127.0.0.1:0" || len(o.keys) != 2 || o.allow[0] != "127.0.0.1:81" || o.batch.Workers != 3 ||
		o.batch.TTL != batch.Duration(2*time.Hour) || o.batch.MaxBytes != 1000 || o.db != "batchkit.db" ||
		o.batch.MaxDeadline != batch.Duration(90*time.Second) {
		t.Errorf("parsed %+v", o)
	}
	if o.webhookSecretFile != "/etc/hook" || o.batch.WebhookTimeout != batch.Duration(3*time.Second) || o.batch.WebhookBackoff != batch.Duration(time.Second) ||
		o.batch.WebhookRetryFor != batch.Duration(6*time.Hour) || !o.webhookLegacySignature {
		t.Errorf("parsed webhook flags %+v", o)
	}
	if !o.mcp {
		t.Error("the MCP server is off by default")
	}
	if o, err := parseFlags([]string{"-mcp=false"}, io.Discard, io.Discard); err != nil || o.mcp {
		t.Errorf("-mcp=false: mcp %v, %v", o.mcp, err)
	}
	if _, err := parseFlags([]string{"-bogus"}, io.Discard, io.Discard); err == nil {
		t.Error("unknown flag accepted")
	}
	if _, err := parseFlags([]string{"extra"}, io.Discard, io.Discard); err == nil {
		t.Error("stray argument accepted")
	}
}

// pageServer serves /page/N at once and /slow only when released.
type pageServer struct {
	addr    string
	slowHit chan struct{}
	next    chan struct{} // lets one slow answer go
	release chan struct{} // closed at the end: lets every slow answer go
}

func startPages(t *testing.T) *pageServer {
	t.Helper()
	p := &pageServer{slowHit: make(chan struct{}, 16), next: make(chan struct{}, 16), release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /page/{n}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "page %s body", r.PathValue("n"))
	})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		p.slowHit <- struct{}{}
		select {
		case <-p.next:
		case <-p.release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "slow body")
	})
	p.addr = serveTest(t, mux, func() { close(p.release) })
	return p
}

// serveTest serves h on a loopback port until the test ends, when it
// calls release (to let held answers go) and closes the server; it
// returns the address.
func serveTest(t *testing.T, h http.Handler, release func()) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() {
		release()
		srv.Close()
	})
	return ln.Addr().String()
}

// daemonProc is a running batchd.
type daemonProc struct {
	cmd    *exec.Cmd
	server string
	hint   string // the start-up line that says what to try
	stderr *batchtest.Buffer
	done   chan error
}

func buildDaemon(t *testing.T) string {
	t.Helper()
	return testbin.Build(t, "batchd", raceEnabled)
}

func startDaemon(t *testing.T, bin string, args ...string) *daemonProc {
	t.Helper()
	return startDaemonEnv(t, bin, nil, args...)
}

// startDaemonEnv is startDaemon with env added to the test's environment.
func startDaemonEnv(t *testing.T, bin string, env []string, args ...string) *daemonProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{cmd: cmd, stderr: &batchtest.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "serving the batch API on "); ok {
			d.server, _, _ = strings.Cut(rest, " ")
		}
		if strings.HasPrefix(sc.Text(), "batchd: try: ") {
			d.hint = sc.Text()
			break
		}
	}
	go io.Copy(io.Discard, stdout)
	go func() { d.done <- cmd.Wait() }()
	if d.server == "" {
		cmd.Process.Kill()
		t.Fatalf("daemon did not start: %s", d.stderr)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-d.done
	})
	return d
}

// stop sends SIGTERM and waits for a graceful exit.
func (d *daemonProc) stop(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		if err != nil {
			t.Fatalf("daemon exited with %v\n%s", err, d.stderr)
		}
		d.done <- nil // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("daemon did not stop within 30s of SIGTERM")
	}
}

// cli runs one batch command against the daemon and returns its stdout.
func cli(t *testing.T, server, key string, stdin string, args ...string) string {
	t.Helper()
	stdout, stderr, err := runCLI(t.Context(), server, key, stdin, args...)
	if err != nil {
		t.Fatalf("batch %v: %v\n%s", args, err, stderr)
	}
	return stdout
}

// runCLI runs one batch command against the daemon, for at most a minute;
// safe to call from any goroutine.
func runCLI(ctx context.Context, server, key string, stdin string, args ...string) (stdout, stderr string, err error) {
	client, err := batchhttp.NewClient(server, key, nil)
	if err != nil {
		return "", "", err
	}
	var out, errOut bytes.Buffer
	c := batchcli.New(batchcli.Config{Client: client, Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut, PollWait: 2 * time.Second})
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err = c.Run(ctx, args)
	return out.String(), errOut.String(), err
}

func mustOpen(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}

func TestBatchd_EndToEnd(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := buildDaemon(t)
	pages := startPages(t)
	db := filepath.Join(t.TempDir(), "batchd.db")
	args := []string{"-db", db, "-key", "alice=alice-secret-0123", "-allow", pages.addr, "-jobs-per-caller", "3"}
	d := startDaemon(t, bin, args...)
	base := "http://" + pages.addr

	// The start-up hint names the sample targets file, which exists (the
	// test runs in examples/batchd; the hint is for the repository root).
	if !strings.Contains(d.hint, "go run ./examples/batch submit examples/targets.json") {
		t.Errorf("start-up hint %q does not name examples/targets.json", d.hint)
	}
	if _, err := batchcli.ParseTargets(mustOpen(t, "../targets.json"), batchsift.Options); err != nil {
		t.Errorf("examples/targets.json: %v", err)
	}

	// Job 1 runs to the end.
	sub := decodeJSON[batchhttp.SubmitResponse](t, cli(t, d.server, "alice-secret-0123", base+"/page/1\n"+base+"/page/2\n", "submit", "-"))
	done := decodeJSON[batchhttp.StatusResponse](t, cli(t, d.server, "alice-secret-0123", "", "status", sub.JobID, "--wait", "--results"))
	if done.Status != batch.JobDone || len(done.Targets) != 2 {
		t.Fatalf("job 1 = %+v", done)
	}
	res := decodeJSON[batchhttp.ResultResponse](t, cli(t, d.server, "alice-secret-0123", "", "result", sub.JobID, "1"))
	if env, err := batch.DecodeEnvelope(res.Result); err != nil || env.Content != "page 2 body" {
		t.Fatalf("job 1 result 1 = %s (%v)", res.Result, err)
	}

	// Job 2 is cancelled while its first target is in flight.
	sub2 := decodeJSON[batchhttp.SubmitResponse](t, cli(t, d.server, "alice-secret-0123", base+"/slow\n"+base+"/page/3\n", "submit", "-"))
	<-pages.slowHit
	if c := decodeJSON[batchhttp.CancelResponse](t, cli(t, d.server, "alice-secret-0123", "", "cancel", sub2.JobID)); c.Status != batch.JobCancelled {
		t.Fatalf("cancel = %+v", c)
	}

	// Job 3 is in flight when the daemon stops.
	sub3 := decodeJSON[batchhttp.SubmitResponse](t, cli(t, d.server, "alice-secret-0123", base+"/slow?3\n"+base+"/page/4\n", "submit", "-"))
	<-pages.slowHit // both workers are now in a slow fetch, cut short by the shutdown
	d.stop(t)
	logs := d.stderr.String()

	d = startDaemon(t, bin, args...)
	again := decodeJSON[batchhttp.StatusResponse](t, cli(t, d.server, "alice-secret-0123", "", "status", sub.JobID, "--results"))
	if again.Status != batch.JobDone || again.Targets[0].Result == nil {
		t.Fatalf("job 1 after restart = %+v", again)
	}
	for _, id := range []string{sub3.JobID} {
		st := decodeJSON[batchhttp.StatusResponse](t, cli(t, d.server, "alice-secret-0123", "", "status", id))
		if st.Status != batch.JobFailed || st.Error != "restart" {
			t.Fatalf("interrupted job %s after restart = %+v", id, st)
		}
	}
	st2 := decodeJSON[batchhttp.StatusResponse](t, cli(t, d.server, "alice-secret-0123", "", "status", sub2.JobID))
	if st2.Status != batch.JobCancelled || st2.Targets[0].Status != batch.TargetFailed || st2.Targets[1].Status != batch.TargetPending {
		t.Fatalf("cancelled job after restart = %+v", st2)
	}

	// The job the stop failed is retried, and followed to its end through
	// the results stream: a line per target, each as it finishes.
	retry := decodeJSON[batchhttp.SubmitResponse](t, cli(t, d.server, "alice-secret-0123", "", "retry", sub3.JobID))
	if retry.RetryOf != sub3.JobID || retry.Targets != 2 || retry.JobID == sub3.JobID {
		t.Fatalf("retry = %+v", retry)
	}
	type result struct {
		stdout, stderr string
		err            error
	}
	followed := make(chan result, 1)
	go func() {
		out, errOut, err := runCLI(t.Context(), d.server, "alice-secret-0123", "", "results", retry.JobID, "--follow")
		followed <- result{out, errOut, err}
	}()
	<-pages.slowHit // the retried slow target is in flight
	pages.next <- struct{}{}
	r := <-followed
	if r.err != nil {
		t.Fatalf("results --follow: %v\n%s", r.err, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("results --follow printed %q, want 2 lines", r.stdout)
	}
	for i, l := range lines {
		ts := decodeJSON[batchhttp.TargetStatus](t, l)
		if ts.Idx != i || ts.Status != batch.TargetDone || ts.Outcome != batch.OutcomeOK || ts.RetryOfIdx == nil || *ts.RetryOfIdx != i {
			t.Errorf("results line %d = %s", i, l)
		}
	}
	d.stop(t)
	logs += d.stderr.String()
	for _, secret := range []string{pages.addr, "/page/", "/slow", "alice-secret-0123"} {
		if strings.Contains(logs, secret) {
			t.Errorf("daemon log carries %q:\n%s", secret, logs)
		}
	}
	if !strings.Contains(logs, "job_id="+sub.JobID) {
		t.Errorf("daemon log lacks job lines:\n%s", logs)
	}
	if _, err := os.Stat(db); err != nil {
		t.Errorf("database file: %v", err)
	}
}

// The webhook secret comes from -webhook-secret-file or the environment;
// with neither, the daemon generates one.
func TestLoadWebhookSecret(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	file := filepath.Join(t.TempDir(), "hook")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(webhookSecretEnv, "whsec_from-env")
	if got, err := loadWebhookSecret(options{webhookSecretFile: file}); err != nil || got != secret {
		t.Errorf("from the file: %q, %v", got, err)
	}
	if got, err := loadWebhookSecret(options{}); err != nil || got != "whsec_from-env" {
		t.Errorf("from the environment: %q, %v", got, err)
	}
	t.Setenv(webhookSecretEnv, "")
	if got, err := loadWebhookSecret(options{}); err != nil || got != "" {
		t.Errorf("with none: %q, %v; want none (the daemon generates one)", got, err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{empty, filepath.Join(t.TempDir(), "missing")} {
		if _, err := loadWebhookSecret(options{webhookSecretFile: f}); err == nil {
			t.Errorf("secret file %s accepted", f)
		}
	}
	// A secret file others can read is refused, like a key file.
	for _, perm := range []os.FileMode{0o644, 0o640, 0o604} {
		_, err := loadWebhookSecret(options{webhookSecretFile: writeFile(t, secret+"\n", perm)})
		if err == nil || !strings.Contains(err.Error(), "too open") || strings.Contains(err.Error(), secret) {
			t.Errorf("a %04o secret file: %v, want it refused as too open", perm, err)
		}
	}
}

// Keys come from -key, a key file and the environment, so that they need
// not be on a command line every local user can read.
func TestLoadKeys(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(file, []byte("# batchd keys\nfile=file-secret-0001\n\n  agency=file-secret-0002:restricted  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(keysEnv, "env1=env-secret-00001, env2=env-secret-00002\nenv3=env-secret-00003")
	keys, err := loadKeys(options{keys: listFlag{"flag=flag-secret-0001"}, keyFile: file})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range keys {
		got = append(got, fmt.Sprintf("%s=%s/%v", k.Name, k.Secret, k.Restricted))
	}
	want := "flag=flag-secret-0001/false env1=env-secret-00001/false env2=env-secret-00002/false env3=env-secret-00003/false " +
		"file=file-secret-0001/false agency=file-secret-0002/true"
	if strings.Join(got, " ") != want {
		t.Fatalf("keys = %v, want %s", got, want)
	}
	if _, err := loadKeys(options{keyFile: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("a missing key file was accepted")
	}
	// A malformed spec is refused without printing its secret.
	t.Setenv(keysEnv, "broken:s3cr3t")
	if _, err := loadKeys(options{}); err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("malformed key: %v", err)
	}
	// A short secret is refused, wherever it comes from.
	t.Setenv(keysEnv, "")
	for _, o := range []options{{keys: listFlag{"alice=s3cret"}}, {keyFile: writeFile(t, "alice=s3cret\n", 0o600)}} {
		if _, err := loadKeys(o); err == nil || !strings.Contains(err.Error(), "shorter than 16 bytes") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("a short key: %v, want it refused without repeating it", err)
		}
	}
}

// writeFile writes content to a new file of the test's with mode perm and
// returns its name.
func writeFile(t *testing.T, content string, perm os.FileMode) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "secret")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Chmod(perm); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// The metrics key comes from -metrics-key-file (readable by its owner
// only), $BATCHD_METRICS_KEY or -metrics-key, and is at least 16 bytes.
func TestLoadMetricsKey(t *testing.T) {
	const key = "metrics-key-0123456789"
	t.Setenv(metricsKeyEnv, "metrics-from-env-0123")
	if got, err := loadMetricsKey(options{metricsKeyFile: writeFile(t, key+"\n", 0o600), metricsKey: "metrics-from-flag-0123"}); err != nil || got != key {
		t.Errorf("from the file: %q, %v", got, err)
	}
	if got, err := loadMetricsKey(options{metricsKey: "metrics-from-flag-0123"}); err != nil || got != "metrics-from-env-0123" {
		t.Errorf("from the environment: %q, %v", got, err)
	}
	t.Setenv(metricsKeyEnv, "")
	if got, err := loadMetricsKey(options{metricsKey: "metrics-from-flag-0123"}); err != nil || got != "metrics-from-flag-0123" {
		t.Errorf("from the flag: %q, %v", got, err)
	}
	if got, err := loadMetricsKey(options{}); err != nil || got != "" {
		t.Errorf("with none: %q, %v", got, err)
	}
	if _, err := loadMetricsKey(options{metricsKeyFile: writeFile(t, key, 0o644)}); err == nil || !strings.Contains(err.Error(), "too open") {
		t.Errorf("a file others can read: %v, want it refused", err)
	}
	for _, o := range []options{{metricsKey: "short"}, {metricsKeyFile: writeFile(t, "short\n", 0o600)}} {
		if _, err := loadMetricsKey(o); err == nil || !strings.Contains(err.Error(), "shorter than 16 bytes") {
			t.Errorf("a short key: %v, want it refused", err)
		}
	}
	t.Setenv(metricsKeyEnv, "short")
	if _, err := loadMetricsKey(options{}); err == nil || !strings.Contains(err.Error(), "$"+metricsKeyEnv) {
		t.Errorf("a short key in the environment: %v, want it refused", err)
	}
}

// The exit codes: 0 for -h and -version (on stdout), 2 for a wrong
// command line, 1 when the daemon cannot start: a port in use, a database
// another process holds, a key file others can read or with a bad line.
func TestRun_ExitCodes(t *testing.T) {
	t.Parallel()
	f := func(args []string, want int, wantOut, wantErr string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if got := run(t.Context(), args, &stdout, &stderr); got != want {
			t.Errorf("batchd %q: exit %d, want %d\nstdout: %s\nstderr: %s", args, got, want, &stdout, &stderr)
		}
		if !strings.Contains(stdout.String(), wantOut) || !strings.Contains(stderr.String(), wantErr) {
			t.Errorf("batchd %q:\nstdout %q, want %q in it\nstderr %q, want %q in it", args, &stdout, wantOut, &stderr, wantErr)
		}
	}
	f([]string{"-h"}, exitOK, "usage: batchd [flags]", "")
	f([]string{"--help"}, exitOK, "-key-file", "")
	f([]string{"-version"}, exitOK, "batchd ", "")
	f([]string{"--version"}, exitOK, "batchd (devel)", "")
	f([]string{"-bogus"}, exitUsage, "", "flag provided but not defined: -bogus")
	f([]string{"extra"}, exitUsage, "", `unexpected argument "extra"`)
	f([]string{"-log-level", "loud"}, exitUsage, "", `Run "batchd -h"`)
	f([]string{"-webhook-legacy-signature"}, exitUsage, "", "-webhook-legacy-signature needs the master secret")

	dir := t.TempDir()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	db := filepath.Join(dir, "batch.db")
	f([]string{"-addr", busy.Addr().String(), "-db", db, "-key", "a=a-secret-0123456789"}, exitError, "", "address already in use")

	held, err := batchstore.Open(t.Context(), filepath.Join(dir, "held.db"), batchstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	f([]string{"-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "held.db"), "-key", "a=a-secret-0123456789"}, exitError, "", "in use by another store")

	open := filepath.Join(dir, "keys-open")
	if err := os.WriteFile(open, []byte("a=a-secret-0123456789\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f([]string{"-addr", "127.0.0.1:0", "-db", db, "-key-file", open}, exitError, "", "permissions 0644 are too open")
	bad := filepath.Join(dir, "keys-bad")
	if err := os.WriteFile(bad, []byte("# keys\na=a-secret-0123456789\nbroken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f([]string{"-addr", "127.0.0.1:0", "-db", db, "-key-file", bad}, exitError, "", "line 3")
}

// Secrets on the command line, which every local user can read in
// /proc/PID/cmdline: -key and -metrics-key, and a password in a -db URL, are
// warned about, never echoed; a libpq keyword/value string given to -db is
// refused (it would become an SQLite file name), and never echoed either.
func TestRun_SecretsOnCommandLine(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	db := filepath.Join(dir, "batch.db")
	f := func(args []string, want int, wantErr string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if got := run(t.Context(), args, &stdout, &stderr); got != want {
			t.Errorf("batchd %q: exit %d, want %d\nstderr: %s", args, got, want, &stderr)
		}
		out := stdout.String() + stderr.String()
		if !strings.Contains(out, wantErr) {
			t.Errorf("batchd %q: output %q, want %q in it", args, out, wantErr)
		}
		for _, secret := range []string{"hunter2", "a-secret-0123456789", "metrics-secret-0123"} {
			if strings.Contains(out, secret) {
				t.Errorf("batchd %q: the output holds %q: %s", args, secret, out)
			}
		}
	}
	addr := busy.Addr().String() // the run ends at listen, after the warnings
	f([]string{"-addr", addr, "-db", db, "-key", "a=a-secret-0123456789"}, exitError, "-key puts a secret in the process list")
	f([]string{"-addr", addr, "-db", db, "-key-file", "/nonexistent", "-metrics-key", "metrics-secret-0123"}, exitError, "-metrics-key puts a secret in the process list")
	f([]string{"-addr", addr, "-db", "postgres://bob:hun@ter2@127.0.0.1:1/jobs", "-key", "a=a-secret-0123456789"}, exitError, "-db holds a password")
	f([]string{"-addr", addr, "-db", "host=127.0.0.1 password=hunter2 dbname=jobs", "-key", "a=a-secret-0123456789"}, exitUsage, "keyword/value")
	f([]string{"-addr", addr, "-db", "host=127.0.0.1", "password=hunter2", "-key", "a=a-secret-0123456789"}, exitUsage, "keyword/value")
	f([]string{"-db", db, "password=hunter2"}, exitUsage, "unexpected argument")
	if names, _ := os.ReadDir("."); len(names) > 0 {
		for _, n := range names {
			if strings.Contains(n.Name(), "hunter2") {
				t.Errorf("a file named after the connection string: %s", n.Name())
			}
		}
	}
}

// The generated-secrets file is written as a new file that replaces the
// name: a symlink or a hard link planted at the name (in a shared
// directory, say) does not carry the secrets into the file it points to.
func TestWritePrivate_NoFollow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("victim\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sym, hard := filepath.Join(dir, "sym.env"), filepath.Join(dir, "hard.env")
	if err := os.Symlink(victim, sym); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(victim, hard); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{sym, hard} {
		if err := writePrivate(name, "export BATCH_KEY=generated-secret\n"); err != nil {
			t.Fatalf("%s: %v", filepath.Base(name), err)
		}
		if b, _ := os.ReadFile(victim); string(b) != "victim\n" {
			t.Errorf("writing %s wrote the file it links to: %q", filepath.Base(name), b)
		}
		fi, err := os.Lstat(name)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want a regular file, 0600", filepath.Base(name), fi.Mode(), err)
		}
		if b, _ := os.ReadFile(name); string(b) != "export BATCH_KEY=generated-secret\n" {
			t.Errorf("%s holds %q", filepath.Base(name), b)
		}
	}
	if names, _ := filepath.Glob(filepath.Join(dir, ".*")); len(names) != 0 {
		t.Errorf("temporary files left: %v", names)
	}
}

// The keys file docs/operations.md has a newcomer write at the root of a clone
// (and examples/embed's) is git-ignored, so that it is not committed.
func TestKeysFileIgnored(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git work tree: %v", err)
	}
	for _, p := range []string{"keys", "examples/embed/keys"} {
		cmd := exec.Command("git", "check-ignore", "-q", p)
		cmd.Dir = strings.TrimSpace(string(root))
		if err := cmd.Run(); err != nil {
			t.Errorf("%s is not git-ignored: %v", p, err)
		}
	}
}

// -print-webhook-secret prints the secret a caller verifies its deliveries
// with, derived from the master secret, and exits without serving; without
// a master secret it is a usage error.
func TestRun_PrintWebhookSecret(t *testing.T) {
	t.Setenv(webhookSecretEnv, "")
	file := filepath.Join(t.TempDir(), "hook")
	const master = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	if err := os.WriteFile(file, []byte(master+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want, err := batchhttp.CallerWebhookSecret(master, "alice")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"-webhook-secret-file", file, "-print-webhook-secret", "alice"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d; stderr %s", code, &stderr)
	}
	if got := strings.TrimSpace(stdout.String()); got != want {
		t.Errorf("printed %q, want alice's secret %q", got, want)
	}
	stdout.Reset()
	if code := run(t.Context(), []string{"-print-webhook-secret", "alice"}, &stdout, &stderr); code != exitUsage ||
		!strings.Contains(stderr.String(), "needs the master secret") || stdout.Len() != 0 {
		t.Errorf("without a master secret: exit %d, stdout %q, stderr %q", code, &stdout, &stderr)
	}
}

// A key and a webhook secret batchd generated do not go to a stdout that
// is not a terminal (a log that keeps them): they go to -generated-file,
// mode 0600, as shell exports, and stdout names the file.
func TestServe_GeneratedSecretsToFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var stdout, stderr batchtest.Buffer
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, []string{"-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "b.db")}, &stdout, &stderr)
	}()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stdout.String(), "batchd: try:"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("batchd did not start:\n%s\n%s", &stdout, &stderr)
		}
	}
	stop()
	if code := <-exit; code != exitOK {
		t.Errorf("exit %d: %s", code, &stderr)
	}
	file := filepath.Join(dir, "batchd-generated.env")
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatalf("the generated file: %v\nstdout: %s", err, &stdout)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("the generated file's mode is %04o, want 0600", perm)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var key, hook string
	for line := range strings.SplitSeq(string(b), "\n") {
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "BATCH_KEY="); ok {
				key = v
			}
			if v, ok := strings.CutPrefix(f, webhookSecretEnv+"="); ok {
				hook = v
			}
		}
	}
	if len(key) < batchserver.MinSecretBytes || !strings.HasPrefix(hook, "whsec_") {
		t.Fatalf("the generated file holds key %q and webhook secret %q:\n%s", key, hook, b)
	}
	for _, out := range []string{stdout.String(), stderr.String()} {
		if strings.Contains(out, key) || strings.Contains(out, hook) {
			t.Errorf("a generated secret was printed:\n%s", out)
		}
	}
	if !strings.Contains(stdout.String(), file) {
		t.Errorf("stdout does not name the generated file:\n%s", &stdout)
	}
}

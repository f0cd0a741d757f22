package batchcli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchcli"
	"github.com/siftfetch/batchkit/batchhttp"
	"github.com/siftfetch/batchkit/batchhttp/batchserver"
	"github.com/siftfetch/batchkit/internal/apitest"
)

type testBundle struct {
	runner *batch.Runner
	fetch  *batchtest.BlockingFetcher
	url    string
	stdout *bytes.Buffer
	stderr *bytes.Buffer
	cli    *batchcli.CLI
}

// setup serves the real handler over an in-memory runner whose fetches block
// until released, and returns a CLI speaking to it as key "alice".
func setup(t *testing.T, stdin string, terminal bool) *testBundle {
	t.Helper()
	fetch := batchtest.NewBlockingFetcher()
	b := &testBundle{fetch: fetch, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	b.runner, b.url = serve(t, fetch.Fetch)
	b.cli = b.newCLI(t, "alice-key", stdin, terminal)
	return b
}

// serve serves the real handler over an in-memory runner with fetch, for
// the keys alice-key and bob-key, and returns the runner and the server's
// URL.
func serve(t *testing.T, fetch batch.FetchFunc) (*batch.Runner, string) {
	t.Helper()
	r := batchtest.NewRunner(t, batch.Config{Fetch: fetch, Options: batchsift.Options, PollInterval: batch.Duration(10 * time.Millisecond)})
	return r, apitest.Serve(t, r, batchserver.Key{Name: "alice", Secret: "alice-key"}, batchserver.Key{Name: "bob", Secret: "bob-key"})
}

func (b *testBundle) newCLI(t *testing.T, key, stdin string, terminal bool) *batchcli.CLI {
	t.Helper()
	client, err := batchhttp.NewClient(b.url, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	return batchcli.New(batchcli.Config{
		Client:     client,
		Options:    batchsift.Options,
		Stdin:      strings.NewReader(stdin),
		Stdout:     b.stdout,
		Stderr:     b.stderr,
		IsTerminal: func(io.Writer) bool { return terminal },
		PollWait:   time.Second,
	})
}

func (b *testBundle) run(t *testing.T, args ...string) error {
	t.Helper()
	b.stdout.Reset()
	b.stderr.Reset()
	return b.cli.Run(t.Context(), args)
}

func decode[T any](t *testing.T, data []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("stdout is not the JSON body: %v\n%s", err, data)
	}
	return v
}

func TestCLI_SubmitStatusResultCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, "https://a.test/1\nhttps://a.test/2\n", false)

	if err := b.run(t, "submit", "-"); err != nil {
		t.Fatalf("submit: %v\n%s", err, b.stderr)
	}
	sub := decode[batchhttp.SubmitResponse](t, b.stdout.Bytes())
	if !sub.Success || sub.JobID == "" || sub.Reused || sub.Targets != 2 {
		t.Fatalf("submit printed %+v", sub)
	}

	if err := b.run(t, "status", sub.JobID); err != nil {
		t.Fatalf("status: %v", err)
	}
	st := decode[batchhttp.StatusResponse](t, b.stdout.Bytes())
	if st.JobID != sub.JobID || st.TargetsTotal != 2 {
		t.Fatalf("status printed %+v", st)
	}

	b.fetch.Release()
	b.fetch.Release()
	if err := b.run(t, "status", sub.JobID, "--wait", "--results"); err != nil {
		t.Fatalf("status --wait: %v\n%s", err, b.stderr)
	}
	st = decode[batchhttp.StatusResponse](t, b.stdout.Bytes())
	if st.Status != batch.JobDone || len(st.Targets) != 2 || st.Targets[1].Result == nil {
		t.Fatalf("status --wait printed %+v", st)
	}
	if !strings.Contains(b.stderr.String(), "2 ok / 0 failed / 2 total · 00:") || strings.Contains(b.stderr.String(), "\r") {
		t.Errorf("plain progress lines expected, got %q", b.stderr)
	}

	if err := b.run(t, "result", sub.JobID, "1"); err != nil {
		t.Fatalf("result: %v", err)
	}
	res := decode[batchhttp.ResultResponse](t, b.stdout.Bytes())
	env, err := batch.DecodeEnvelope(res.Result)
	if err != nil || env.Content != "released:https://a.test/2" {
		t.Fatalf("result printed %+v (%v)", res, err)
	}

	// A finished job cannot be cancelled: the server says no, exit 1.
	err = b.run(t, "cancel", sub.JobID)
	if batchcli.ExitCode(err) != 1 || !strings.Contains(b.stderr.String(), "job already finished (HTTP 409)") {
		t.Fatalf("cancel of a done job: %v, stderr %q", err, b.stderr)
	}
	if !errors.Is(err, batchcli.ErrReported) {
		t.Errorf("error %v is not marked reported", err)
	}
}

// TestCLI_SubmitDeadline: submit --deadline sends the deadline, the status
// prints it, and a job it ends shows its expired targets.
func TestCLI_SubmitDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t, "https://a.test/1\nhttps://a.test/2\n", false)
	if err := b.run(t, "submit", "-", "--deadline", "300ms"); err != nil {
		t.Fatalf("submit: %v\n%s", err, b.stderr)
	}
	sub := decode[batchhttp.SubmitResponse](t, b.stdout.Bytes())
	// Target 0 holds until the deadline cuts it, and returns in its grace.
	info := batchtest.WaitFinished(t, b.runner, batch.Caller{Name: "alice"}, sub.JobID, 10*time.Second)
	if info.Deadline.IsZero() {
		t.Fatalf("the job has no deadline: %+v", info)
	}
	err := b.run(t, "status", sub.JobID)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	st := decode[batchhttp.StatusResponse](t, b.stdout.Bytes())
	if st.Deadline == nil || st.Error != "deadline" || len(st.Targets) != 2 || st.Targets[1].Outcome != batch.OutcomeExpired {
		t.Fatalf("status printed %s", b.stdout)
	}
	if !strings.Contains(b.stdout.String(), `"deadline": "`) {
		t.Errorf("status output has no deadline: %s", b.stdout)
	}
}

// TestCLI_SubmitSkipInvalid: submit --skip-invalid sends on_invalid skip:
// the refused targets are skipped and listed, the others fetched; without
// it the server refuses the submit.
func TestCLI_SubmitSkipInvalid(t *testing.T) {
	t.Parallel()
	in := `{"targets":[{"url":"https://a.test/1"},{"url":""},{"url":"https://a.test/3","mode":"fast"}]}`
	b := setup(t, in, false)
	err := b.run(t, "submit", "-")
	if batchcli.ExitCode(err) != 1 || !strings.Contains(b.stderr.String(), "invalid batch: target 1: empty url") {
		t.Fatalf("submit without the flag: %v, stderr %q", err, b.stderr)
	}
	b.cli = b.newCLI(t, "alice-key", in, false)
	if err := b.run(t, "submit", "-", "--skip-invalid"); err != nil {
		t.Fatalf("submit --skip-invalid: %v\n%s", err, b.stderr)
	}
	sub := decode[batchhttp.SubmitResponse](t, b.stdout.Bytes())
	want := []batchhttp.SkippedTarget{
		{Idx: 1, Outcome: batch.OutcomeInvalid, Error: "invalid target: empty url"},
		{Idx: 2, Outcome: batch.OutcomeInvalid, Error: `invalid target: unknown mode "fast"`},
	}
	if sub.Targets != 3 || sub.Skipped != 2 || !slices.Equal(sub.SkippedTargets, want) {
		t.Fatalf("submit printed %s", b.stdout)
	}
	b.fetch.Release()
	info := batchtest.WaitFinished(t, b.runner, batch.Caller{Name: "alice"}, sub.JobID, 10*time.Second)
	if info.Status != batch.JobPartial || b.fetch.Calls()[0] != "https://a.test/1" || len(b.fetch.Calls()) != 1 {
		t.Errorf("job %s, fetched %q; want partial, target 0 alone fetched", info.Status, b.fetch.Calls())
	}
}

// TestCLI_SubmitEvents: submit --events sets the events of the input's
// webhook, and the status prints them; without a webhook in the input it
// is a usage error, and nothing is sent.
func TestCLI_SubmitEvents(t *testing.T) {
	t.Parallel()
	r := batchtest.NewRunner(t, batch.Config{Options: batchsift.Options,
		Deliver: func(context.Context, batch.WebhookEvent) error { return nil }})
	b := &testBundle{runner: r, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{},
		url: apitest.Serve(t, r, batchserver.Key{Name: "alice", Secret: "alice-key"})}
	b.cli = b.newCLI(t, "alice-key", `{"targets":[{"url":"https://a.test/1"}],"webhook":{"url":"https://hooks.example/in"}}`, false)
	if err := b.run(t, "submit", "-", "--events", "batch.target.finished,batch.finished"); err != nil {
		t.Fatalf("submit: %v\n%s", err, b.stderr)
	}
	sub := decode[batchhttp.SubmitResponse](t, b.stdout.Bytes())
	if err := b.run(t, "status", sub.JobID); err != nil {
		t.Fatalf("status: %v", err)
	}
	st := decode[batchhttp.StatusResponse](t, b.stdout.Bytes())
	if want := []string{"batch.target.finished", "batch.finished"}; st.Webhook == nil || !slices.Equal(st.Webhook.Events, want) {
		t.Errorf("status printed webhook %+v, want the events %v", st.Webhook, want)
	}

	b.cli = b.newCLI(t, "alice-key", "https://a.test/2\n", false)
	err := b.run(t, "submit", "-", "--events", "batch.target.finished")
	if batchcli.ExitCode(err) != batchcli.ExitUsage || !strings.Contains(err.Error(), "--events needs a webhook in the input") {
		t.Errorf("--events without a webhook: %v (exit %d)", err, batchcli.ExitCode(err))
	}
	if jobs, _ := r.List(t.Context(), batch.Caller{Name: "alice"}, 10); len(jobs) != 1 {
		t.Errorf("%d jobs, want the first alone", len(jobs))
	}
}

func TestCLI_CancelAndList(t *testing.T) {
	t.Parallel()
	b := setup(t, "", false)
	path := filepath.Join(t.TempDir(), "targets.json")
	if err := os.WriteFile(path, []byte(`{"targets":[{"url":"https://a.test/x"},{"url":"https://a.test/y"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.run(t, "submit", path); err != nil {
		t.Fatalf("submit: %v\n%s", err, b.stderr)
	}
	id := decode[batchhttp.SubmitResponse](t, b.stdout.Bytes()).JobID
	<-b.fetch.Started
	if err := b.run(t, "cancel", id); err != nil {
		t.Fatalf("cancel: %v\n%s", err, b.stderr)
	}
	if c := decode[batchhttp.CancelResponse](t, b.stdout.Bytes()); !c.Success || c.Status != batch.JobCancelled {
		t.Fatalf("cancel printed %+v", c)
	}
	b.fetch.Release()
	if err := b.run(t, "list", "--limit", "5"); err != nil {
		t.Fatalf("list: %v", err)
	}
	if l := decode[batchhttp.ListResponse](t, b.stdout.Bytes()); len(l.Jobs) != 1 || l.Jobs[0].JobID != id {
		t.Fatalf("list printed %+v", l)
	}
	// Another caller sees nothing of it.
	bob := b.newCLI(t, "bob-key", "", false)
	b.stdout.Reset()
	b.stderr.Reset()
	err := bob.Run(t.Context(), []string{"status", id})
	if batchcli.ExitCode(err) != 1 || !strings.Contains(b.stderr.String(), "not found (HTTP 404)") {
		t.Fatalf("bob's status: %v, stderr %q", err, b.stderr)
	}
}

func TestCLI_WaitProgressOnTerminal(t *testing.T) {
	t.Parallel()
	b := setup(t, "https://a.test/1\nhttps://a.test/2\nhttps://a.test/3\n", true)
	if err := b.run(t, "submit", "-"); err != nil {
		t.Fatal(err)
	}
	id := decode[batchhttp.SubmitResponse](t, b.stdout.Bytes()).JobID
	go func() {
		for range 3 {
			<-b.fetch.Started
			time.Sleep(20 * time.Millisecond)
			b.fetch.Release()
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	b.stdout.Reset()
	b.stderr.Reset()
	if err := b.cli.Run(ctx, []string{"status", id, "--wait"}); err != nil {
		t.Fatalf("status --wait: %v", err)
	}
	progress := b.stderr.String()
	if !strings.Contains(progress, "\r\033[K") || !strings.Contains(progress, "3 ok / 0 failed / 3 total · 00:0") || !strings.HasSuffix(progress, "done\n") {
		t.Errorf("terminal progress = %q", progress)
	}
	if st := decode[batchhttp.StatusResponse](t, b.stdout.Bytes()); st.Status != batch.JobDone || st.Targets[0].Result != nil {
		t.Errorf("final body = %+v (no results were asked for)", st)
	}
}

// frames passes each write to it on a channel: one frame of the live line.
type frames chan string

func (f frames) Write(p []byte) (int, error) {
	f <- string(p)
	return len(p), nil
}

// On a terminal the live line's clock ticks while nothing changes. The
// server answers the first read at once and holds every long-poll until the
// client goes, so a second, different frame can only come from the tick.
// (Frames come once a second; the test bounds their number, not the time.)
func TestCLI_WaitProgressTicks(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("wait") != "" {
			<-r.Context().Done() // no change, ever
			return
		}
		json.NewEncoder(w).Encode(batchhttp.StatusResponse{
			JobID: "j", Status: batch.JobRunning, TargetsTotal: 3, TargetsDone: 1,
			Targets: []batchhttp.TargetStatus{{Idx: 0, Status: batch.TargetDone}, {Idx: 1, Status: batch.TargetRunning}, {Idx: 2, Status: batch.TargetPending}},
		})
	}))
	t.Cleanup(srv.Close)
	client, err := batchhttp.NewClient(srv.URL, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	out := make(frames, 64)
	cli := batchcli.New(batchcli.Config{
		Client: client, Stdout: io.Discard, Stderr: out,
		IsTerminal: func(io.Writer) bool { return true }, PollWait: time.Minute,
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- cli.Run(ctx, []string{"status", "j", "--wait"}) }()

	guard := time.NewTimer(30 * time.Second) // a stuck clock fails here instead of at the test timeout
	defer guard.Stop()
	var seen []string
	for len(seen) < 10 && (len(seen) < 2 || seen[len(seen)-1] == seen[0]) {
		select {
		case f := <-out:
			seen = append(seen, f)
		case <-guard.C:
			t.Fatalf("no new frame in 30s; frames so far: %q", seen)
		}
	}
	cancel()
	go func() {
		for range out { // the newline and the interrupt message
		}
	}()
	err = <-done
	close(out)
	if len(seen) < 2 || seen[0] == seen[len(seen)-1] {
		t.Fatalf("the line did not change over %d frames: %q", len(seen), seen)
	}
	for _, f := range seen {
		if !strings.HasPrefix(f, "\r\033[K1 ok / 0 failed / 3 total · 00:") || !strings.HasSuffix(f, " · running") {
			t.Errorf("frame %q, want a redraw of the same counts with only the clock moving", f)
		}
	}
	if batchcli.ExitCode(err) != batchcli.ExitInterrupted {
		t.Errorf("exit code %d after the cancel, want %d", batchcli.ExitCode(err), batchcli.ExitInterrupted)
	}
}

func TestCLI_ResultsAndRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, "https://a.test/1\nhttps://a.test/2\n", false)
	if err := b.run(t, "submit", "-"); err != nil {
		t.Fatalf("submit: %v\n%s", err, b.stderr)
	}
	id := decode[batchhttp.SubmitResponse](t, b.stdout.Bytes()).JobID

	// results --follow prints each target as it finishes, a line each, and
	// ends with the job.
	out := &batchtest.Buffer{}
	client, err := batchhttp.NewClient(b.url, "alice-key", nil)
	if err != nil {
		t.Fatal(err)
	}
	follow := batchcli.New(batchcli.Config{Client: client, Stdout: out, Stderr: io.Discard})
	done := make(chan error, 1)
	go func() { done <- follow.Run(t.Context(), []string{"results", id, "--follow"}) }()
	<-b.fetch.Started
	b.fetch.Release()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "\n") {
		if time.Now().After(deadline) {
			t.Fatal("the first target never reached results --follow")
		}
		time.Sleep(time.Millisecond)
	}
	// The first line is out while the second target is still in flight.
	<-b.fetch.Started
	if err := b.run(t, "cancel", id); err != nil {
		t.Fatalf("cancel: %v\n%s", err, b.stderr)
	}
	b.fetch.Release()
	if err := <-done; err != nil {
		t.Fatalf("results --follow: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("results --follow printed %d lines: %q", len(lines), out)
	}
	for i, l := range lines {
		ts := decode[batchhttp.TargetStatus](t, []byte(l))
		if ts.Idx != i || ts.Status != batch.TargetDone || ts.Outcome != batch.OutcomeOK || ts.Result == nil {
			t.Errorf("line %d: %s", i, l)
		}
	}

	// results --after 0 prints the rest.
	if err := b.run(t, "results", id, "--after", "0"); err != nil {
		t.Fatalf("results --after: %v\n%s", err, b.stderr)
	}
	if got := decode[batchhttp.TargetStatus](t, b.stdout.Bytes()); got.Idx != 1 || strings.Count(b.stdout.String(), "\n") != 1 {
		t.Errorf("results --after 0 printed %q", b.stdout)
	}

	// Every target done: nothing to retry, the server says no (exit 1).
	err = b.run(t, "retry", id)
	if batchcli.ExitCode(err) != batchcli.ExitRefused || !strings.Contains(b.stderr.String(), "nothing to retry") {
		t.Fatalf("retry of a done job: %v, stderr %q", err, b.stderr)
	}
	if err := b.run(t, "retry", "--after", "1", id); batchcli.ExitCode(err) != batchcli.ExitUsage {
		t.Errorf("retry --after: exit %d, want usage", batchcli.ExitCode(err))
	}
}

func TestCLI_RetryCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t, "https://a.test/1\nhttps://a.test/2\nhttps://a.test/3\n", false)
	if err := b.run(t, "submit", "-"); err != nil {
		t.Fatalf("submit: %v\n%s", err, b.stderr)
	}
	id := decode[batchhttp.SubmitResponse](t, b.stdout.Bytes()).JobID
	<-b.fetch.Started
	if err := b.run(t, "cancel", id); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	b.fetch.Release()
	if err := b.run(t, "status", id, "--wait"); batchcli.ExitCode(err) != batchcli.ExitJobNotDone {
		t.Fatalf("status --wait of a cancelled job: %v", err)
	}
	// Until the target in flight at the cancel is stored the job is held;
	// then the retry takes the two that never ran.
	var sub batchhttp.SubmitResponse
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := b.run(t, "retry", id)
		if err == nil {
			sub = decode[batchhttp.SubmitResponse](t, b.stdout.Bytes())
			break
		}
		if !strings.Contains(b.stderr.String(), "job still live") || time.Now().After(deadline) {
			t.Fatalf("retry: %v, stderr %q", err, b.stderr)
		}
		time.Sleep(time.Millisecond)
	}
	if sub.RetryOf != id || sub.Targets != 2 || sub.JobID == id {
		t.Fatalf("retry printed %+v", sub)
	}
	b.fetch.Release()
	b.fetch.Release()
	if err := b.run(t, "status", sub.JobID, "--wait"); err != nil {
		t.Fatalf("status --wait of the retry: %v\n%s", err, b.stderr)
	}
	st := decode[batchhttp.StatusResponse](t, b.stdout.Bytes())
	if st.RetryOf != id || len(st.Targets) != 2 || *st.Targets[0].RetryOfIdx != 1 || *st.Targets[1].RetryOfIdx != 2 {
		t.Fatalf("the retry's status: %+v", st)
	}
}

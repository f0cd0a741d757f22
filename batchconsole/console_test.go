package batchconsole_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchdriver"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchconsole"
)

const (
	operatorKey = "operator-key-0123456789"
	// marker is in every target and webhook URL of the tests: no answer
	// of the console may carry it.
	marker = "url-marker-5e1f"
)

type testBundle struct {
	store  *batchtest.Store
	runner *batch.Runner
	server *httptest.Server
}

func setup(t *testing.T, fetch batch.FetchFunc) *testBundle {
	t.Helper()
	store := batchtest.NewStore()
	runner := batchtest.NewRunner(t, batch.Config{
		Store: store, Fetch: fetch, JobsPerCaller: 4,
		Deliver: func(context.Context, batch.WebhookEvent) error { return errors.New("receiver down") },
	})
	h, err := batchconsole.New(batchconsole.Config{Store: store, Keys: []string{operatorKey}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	h.Mount(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &testBundle{store: store, runner: runner, server: srv}
}

// markedTargets are n targets whose URLs carry the marker in their host,
// path and query.
func markedTargets(n int) []batch.Target {
	ts := make([]batch.Target, n)
	for i := range ts {
		ts[i] = batch.Target{URL: "https://" + marker + ".example/" + marker + "/" + string(rune('a'+i)) + "?q=" + marker}
	}
	return ts
}

func (b *testBundle) submit(t *testing.T, caller batch.Caller, n int) string {
	t.Helper()
	job, _, err := b.runner.SubmitWith(t.Context(), caller, markedTargets(n),
		batch.SubmitOptions{WebhookURL: "https://hooks." + marker + ".example/" + marker})
	if err != nil {
		t.Fatal(err)
	}
	return job.ID
}

// get fetches path with the operator key and returns the status and body;
// every body is checked for the marker.
func (b *testBundle) get(t *testing.T, path string, auth func(*http.Request)) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.server.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != nil {
		auth(req)
	}
	resp, err := b.server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), marker) {
		t.Errorf("GET %s: the answer carries a URL:\n%s", path, body)
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			if strings.Contains(v, marker) {
				t.Errorf("GET %s: header %s carries a URL: %q", path, k, v)
			}
		}
	}
	return resp.StatusCode, resp.Header, string(body)
}

func bearer(key string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+key) }
}

func basic(key string) func(*http.Request) {
	return func(r *http.Request) { r.SetBasicAuth("operator", key) }
}

var operator = bearer(operatorKey)

func TestConsole_Auth(t *testing.T) {
	t.Parallel()
	b := setup(t, batchtest.StaticFetcher("ok"))
	f := func(what string, auth func(*http.Request), want int) {
		t.Helper()
		for _, path := range []string{"/console", "/console/", "/console/jobs/x", "/console/assets/console.css"} {
			status, h, body := b.get(t, path, auth)
			if status != want {
				t.Errorf("%s: GET %s = %d, want %d: %s", what, path, status, want, body)
			}
			if want == http.StatusUnauthorized && !strings.HasPrefix(h.Get("WWW-Authenticate"), "Basic ") {
				t.Errorf("%s: GET %s: no Basic challenge: %q", what, path, h.Get("WWW-Authenticate"))
			}
		}
	}
	f("no key", nil, http.StatusUnauthorized)
	f("a wrong key", bearer("not-the-operator-key"), http.StatusUnauthorized)
	f("a wrong password", basic("not-the-operator-key"), http.StatusUnauthorized)
	f("an empty bearer", bearer(""), http.StatusUnauthorized)
	// With the key, the pages answer (an unknown job is 404, past the auth).
	status, _, _ := b.get(t, "/console", operator)
	if status != http.StatusOK {
		t.Errorf("with the bearer key: %d", status)
	}
	if status, _, _ := b.get(t, "/console", basic(operatorKey)); status != http.StatusOK {
		t.Errorf("with the key as a Basic password: %d", status)
	}
}

func TestConsole_OverviewNamesJobsWithoutURLs(t *testing.T) {
	t.Parallel()
	fetch := batchtest.ScriptFetcher(map[string]batchtest.Step{
		markedTargets(2)[1].URL: {Err: batch.NewFetchError(batch.OutcomeUpstream5xx, "GET "+markedTargets(2)[1].URL+": 502", nil)},
	})
	b := setup(t, fetch)
	alice := batch.Caller{Name: "alice", Class: "agents"}
	secret := batch.Caller{Name: "secret-tenant-name", Class: "partners", Restricted: true}
	id := b.submit(t, alice, 2)
	rid := b.submit(t, secret, 1)
	batchtest.WaitFinished(t, b.runner, alice, id, 10*time.Second)
	batchtest.WaitFinished(t, b.runner, secret, rid, 10*time.Second)

	for _, path := range []string{"/console", "/console?fragment=live"} {
		status, h, body := b.get(t, path, operator)
		if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
			t.Fatalf("GET %s = %d %s", path, status, h.Get("Content-Type"))
		}
		for _, want := range []string{
			`data-job="` + id + `"`, `href="/console/jobs/` + id + `"`, "alice", "partial",
			`data-job="` + rid + `"`, "class partners", "upstream_5xx", "Webhook outbox",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("GET %s lacks %q", path, want)
			}
		}
		if strings.Contains(body, secret.Name) {
			t.Errorf("GET %s names the restricted caller", path)
		}
		if strings.Contains(body, "502") {
			t.Errorf("GET %s carries a fetcher's error text", path)
		}
	}
	// The restricted caller's job page tells each target's status, not its
	// outcome, as that caller's log lines do.
	_, _, rpage := b.get(t, "/console/jobs/"+rid, operator)
	if !strings.Contains(rpage, "withheld (restricted caller)") || strings.Contains(rpage, "upstream_5xx") ||
		strings.Contains(rpage, `<code>ok</code>`) || strings.Contains(rpage, secret.Name) {
		t.Errorf("the restricted caller's job page tells an outcome or its name:\n%s", rpage)
	}
	_, _, page := b.get(t, "/console", operator)
	if !strings.Contains(page, "<!doctype html>") || !strings.Contains(page, `<noscript><meta http-equiv="refresh"`) {
		t.Error("the page is not a whole document that refreshes without JavaScript")
	}
	_, _, frag := b.get(t, "/console?fragment=live", operator)
	if strings.Contains(frag, "<html") {
		t.Error("the live fragment is a whole page")
	}
	// Two webhook events wait: the receiver is down.
	if !regexp.MustCompile(`Pending events</dt><dd>2</dd>`).MatchString(page) {
		t.Errorf("the outbox does not show 2 pending events")
	}
}

func TestConsole_JobPage(t *testing.T) {
	t.Parallel()
	fetch := batchtest.ScriptFetcher(map[string]batchtest.Step{
		markedTargets(3)[2].URL: {Err: batch.NewFetchError(batch.OutcomeBlocked, "blocked: "+marker, nil)},
	})
	b := setup(t, fetch)
	caller := batch.Caller{Name: "bob"}
	id := b.submit(t, caller, 3)
	batchtest.WaitFinished(t, b.runner, caller, id, 10*time.Second)
	status, _, body := b.get(t, "/console/jobs/"+id, operator)
	if status != http.StatusOK {
		t.Fatalf("job page: %d", status)
	}
	for _, want := range []string{`data-idx="0"`, `data-idx="2"`, "blocked", ">ok<", "partial", `href="/console"`} {
		if !strings.Contains(body, want) {
			t.Errorf("job page lacks %q", want)
		}
	}
	for _, path := range []string{"/console/jobs/no-such-job", "/console/jobs/" + strings.Repeat("x", 200)} {
		if status, _, _ := b.get(t, path, operator); status != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", path, status)
		}
	}
	if status, _, _ := b.get(t, "/console/jobs/"+id+"?fragment=live", operator); status != http.StatusOK {
		t.Errorf("job fragment: %d", status)
	}
}

func TestConsole_HeadersAndAssets(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, h, _ := b.get(t, "/console", operator)
	csp := h.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if h.Get("Cache-Control") != "no-store" || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers: %v", h)
	}
	for path, ctype := range map[string]string{
		"/console/assets/console.css": "text/css", "/console/assets/console.js": "text/javascript",
	} {
		status, h, body := b.get(t, path, operator)
		if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), ctype) || len(body) == 0 {
			t.Errorf("GET %s = %d %q (%d bytes)", path, status, h.Get("Content-Type"), len(body))
		}
	}
	if status, _, _ := b.get(t, "/console/assets/nope.js", operator); status != http.StatusNotFound {
		t.Errorf("an unknown asset: %d", status)
	}
	req, _ := http.NewRequest(http.MethodPost, b.server.URL+"/console", nil)
	operator(req)
	resp, err := b.server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /console = %d, want 405", resp.StatusCode)
	}
}

func TestConsole_StaleRunner(t *testing.T) {
	t.Parallel()
	store := batchtest.NewStore()
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for id, at := range map[string]time.Time{"node-fresh": now.Add(-time.Second), "node-gone": now.Add(-time.Hour)} {
		if err := store.Heartbeat(t.Context(), batchdriver.HeartbeatParams{Runner: id, Now: &at}); err != nil {
			t.Fatal(err)
		}
	}
	h, err := batchconsole.New(batchconsole.Config{Store: store, Keys: []string{operatorKey}, StaleAfter: time.Minute,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/console", nil)
	operator(req)
	h.ServeHTTP(rec, req)
	body := rec.Body.String()
	fresh := regexp.MustCompile(`data-runner="node-fresh">.*?</tr>`).FindString(strings.ReplaceAll(body, "\n", ""))
	gone := regexp.MustCompile(`data-runner="node-gone">.*?</tr>`).FindString(strings.ReplaceAll(body, "\n", ""))
	if !strings.Contains(fresh, "alive") || !strings.Contains(fresh, "1s ago") {
		t.Errorf("fresh runner row: %q", fresh)
	}
	if !strings.Contains(gone, "stale") || !strings.Contains(gone, "1h 0m ago") {
		t.Errorf("stale runner row: %q", gone)
	}
}

// failingStore is an Inspector whose reads fail.
type failingStore struct{}

func (failingStore) Overview(context.Context, batchdriver.OverviewParams) (batchdriver.Overview, error) {
	return batchdriver.Overview{}, batch.ErrUnavailable
}

func (failingStore) InspectJob(context.Context, string) (batchdriver.Job, []batchdriver.TargetRecord, error) {
	return batchdriver.Job{}, nil, batch.ErrUnavailable
}

func TestConsole_StoreDown(t *testing.T) {
	t.Parallel()
	h, err := batchconsole.New(batchconsole.Config{Store: failingStore{}, Keys: []string{operatorKey}, Prefix: "/ops/console"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	h.Mount(mux)
	for _, path := range []string{"/ops/console", "/ops/console/jobs/j1"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		operator(req)
		mux.ServeHTTP(rec, req)
		if rec.Code != http.StatusServiceUnavailable {
			t.Errorf("GET %s with the store down = %d, want 503", path, rec.Code)
		}
	}
}

func TestNew_Errors(t *testing.T) {
	t.Parallel()
	store := batchtest.NewStore()
	f := func(what string, opts batchconsole.Config) {
		t.Helper()
		if _, err := batchconsole.New(opts); err == nil {
			t.Errorf("%s: no error", what)
		}
	}
	f("no store", batchconsole.Config{Keys: []string{operatorKey}})
	f("no key", batchconsole.Config{Store: store})
	f("a short key", batchconsole.Config{Store: store, Keys: []string{"short"}})
	for _, p := range []string{"console", "/console/", "/", "/a/../b", "/{x}"} {
		f("prefix "+p, batchconsole.Config{Store: store, Keys: []string{operatorKey}, Prefix: p})
	}
	f("a negative TTL", batchconsole.Config{Store: store, Keys: []string{operatorKey}, TTL: -time.Second})
}

// TestConsole_HandedOn: a job that a runner handed on says so in the job
// list and on its page, and its page counts the attempts of a target that
// was fetched again; a job never handed on says nothing of it in the list.
func TestConsole_HandedOn(t *testing.T) {
	t.Parallel()
	store := batchtest.NewStore()
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	limits := batchdriver.Limits{JobsPerCaller: 4, JobsTotal: 4, TTL: time.Hour}
	for _, id := range []string{"job-moved", "job-stayed"} {
		_, _, err := store.Create(t.Context(), batchdriver.CreateParams{ID: id, Caller: batchdriver.Caller{Name: "alice"},
			IdemKey: id, Targets: []batchdriver.Target{{URL: "https://" + marker + ".example/a"}, {URL: "https://" + marker + ".example/b"}},
			Limits: limits, Now: &now})
		if err != nil {
			t.Fatal(err)
		}
	}
	// node-a claims job-moved and stops with target 0 in flight: it is
	// handed on, target 0 to be fetched again.
	if c, ok, err := store.Claim(t.Context(), batchdriver.ClaimParams{Runner: "node-a", Now: &now}); err != nil || !ok || c.Job.ID != "job-moved" {
		t.Fatalf("Claim = %s, %v, %v", c.Job.ID, ok, err)
	}
	if _, err := store.Reap(t.Context(), batchdriver.ReapParams{Runner: "node-a", HandBack: true, RepeatInFlight: true,
		Reason: "interrupted", Now: &now}); err != nil {
		t.Fatal(err)
	}
	h, err := batchconsole.New(batchconsole.Config{Store: store, Keys: []string{operatorKey}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) string {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		operator(req)
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), marker) {
			t.Fatalf("GET %s = %d (or it carries a URL)", path, rec.Code)
		}
		return strings.ReplaceAll(rec.Body.String(), "\n", "")
	}
	list := get("/console")
	moved := regexp.MustCompile(`data-job="job-moved">.*?</tr>`).FindString(list)
	stayed := regexp.MustCompile(`data-job="job-stayed">.*?</tr>`).FindString(list)
	if !strings.Contains(moved, `data-handed-on="1"`) || !strings.Contains(moved, "handed on ×1") {
		t.Errorf("the handed-on job's row does not say so: %q", moved)
	}
	if stayed == "" || strings.Contains(stayed, "handed on") {
		t.Errorf("the job never handed on: row %q", stayed)
	}
	page := get("/console/jobs/job-moved")
	if !strings.Contains(page, `<dd id="job-handed-on">×1`) {
		t.Errorf("the job page does not say it was handed on once")
	}
	target0 := regexp.MustCompile(`data-idx="0">.*?</tr>`).FindString(page)
	target1 := regexp.MustCompile(`data-idx="1">.*?</tr>`).FindString(page)
	if !strings.Contains(target0, `<td class="num">2</td>`) || !strings.Contains(target1, `<td class="num">1</td>`) {
		t.Errorf("attempts: target 0 %q, target 1 %q; want 2 and 1", target0, target1)
	}
	if !strings.Contains(get("/console/jobs/job-stayed"), `<dd id="job-handed-on">never`) {
		t.Errorf("the job page of a job never handed on does not say so")
	}
}

// TestConsole_JobMetadata: a job's page shows its metadata, keys and
// values, and for a restricted caller the keys alone; no page shows a
// target's custom id.
func TestConsole_JobMetadata(t *testing.T) {
	t.Parallel()
	b := setup(t, batchtest.StaticFetcher("ok"))
	meta := map[string]string{"run": "value-of-run", "step": "value-of-step"}
	submit := func(caller batch.Caller) string {
		t.Helper()
		ts := markedTargets(1)
		ts[0].CustomID = "custom-id-shown-nowhere"
		job, _, err := b.runner.SubmitWith(t.Context(), caller, ts, batch.SubmitOptions{Metadata: meta})
		if err != nil {
			t.Fatal(err)
		}
		batchtest.WaitFinished(t, b.runner, caller, job.ID, 10*time.Second)
		return job.ID
	}
	id := submit(batch.Caller{Name: "alice", Class: "agents"})
	rid := submit(batch.Caller{Name: "secret-tenant-name", Class: "partners", Restricted: true})
	_, _, page := b.get(t, "/console/jobs/"+id, operator)
	if !strings.Contains(page, "<code>run</code>=<code>value-of-run</code>, <code>step</code>=<code>value-of-step</code>") {
		t.Errorf("the job page does not show its metadata:\n%s", page)
	}
	_, _, rpage := b.get(t, "/console/jobs/"+rid, operator)
	if !strings.Contains(rpage, "<code>run</code> <span class=\"class\">(value withheld: restricted caller)</span>") || strings.Contains(rpage, "value-of-") {
		t.Errorf("the restricted caller's job page shows a metadata value, or no keys:\n%s", rpage)
	}
	for _, path := range []string{"/console", "/console/jobs/" + id, "/console/jobs/" + rid} {
		if _, _, body := b.get(t, path, operator); strings.Contains(body, "custom-id-shown-nowhere") {
			t.Errorf("GET %s shows a custom id", path)
		}
	}
}

// TestConsole_SkippedTarget: a target a lenient submit skipped shows no
// attempt and its outcome, never its URL.
func TestConsole_SkippedTarget(t *testing.T) {
	t.Parallel()
	store := batchtest.NewStore()
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	_, _, err := store.Create(t.Context(), batchdriver.CreateParams{ID: "job-skip", Caller: batchdriver.Caller{Name: "alice"},
		IdemKey: "k", Targets: []batchdriver.Target{{URL: "https://" + marker + ".example/a"}, {URL: "http://" + marker + ".localhost/"}},
		Skipped: []batchdriver.TargetFinish{{Idx: 1, Status: batch.TargetFailed, Outcome: batch.OutcomeBlocked, Error: "blocked: localhost"}},
		Limits:  batchdriver.Limits{JobsPerCaller: 4, JobsTotal: 4, TTL: time.Hour}, Now: &now})
	if err != nil {
		t.Fatal(err)
	}
	h, err := batchconsole.New(batchconsole.Config{Store: store, Keys: []string{operatorKey}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/console/jobs/job-skip", nil)
	operator(req)
	h.ServeHTTP(rec, req)
	page := strings.ReplaceAll(rec.Body.String(), "\n", "")
	if rec.Code != http.StatusOK || strings.Contains(page, marker) || strings.Contains(page, "localhost") {
		t.Fatalf("GET = %d (or it carries a URL or the reason)", rec.Code)
	}
	target1 := regexp.MustCompile(`data-idx="1">.*?</tr>`).FindString(page)
	if !strings.Contains(target1, `<td class="num">0</td>`) || !strings.Contains(target1, "<code>blocked</code>") {
		t.Errorf("skipped target row %q, want 0 attempts and outcome blocked", target1)
	}
}

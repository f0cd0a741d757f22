package reliability

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// client speaks the wire API as one caller, and keeps count of what it got.
type client struct {
	base   string // http://addr
	key    string
	http   *http.Client
	counts *answerCounts
}

// answer is one HTTP answer.
type answer struct {
	code       int
	body       []byte
	retryAfter string
}

// errorText returns the error message of an error answer, or "".
func (a answer) errorText() string {
	var e batchhttp.ErrorResponse
	if json.Unmarshal(a.body, &e) != nil {
		return ""
	}
	return e.Error
}

func newClient(addr, caller string, counts *answerCounts) *client {
	return &client{
		base: "http://" + addr, key: keyOf(caller), counts: counts,
		http: &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}},
	}
}

// clients keeps one client per node address and caller, for code that
// speaks as several callers or to several nodes.
type clients struct {
	counts *answerCounts
	m      map[[2]string]*client
}

func newClients(counts *answerCounts) *clients {
	return &clients{counts: counts, m: map[[2]string]*client{}}
}

// get returns the client of caller on the node at addr.
func (cs *clients) get(addr, caller string) *client {
	c, ok := cs.m[[2]string{addr, caller}]
	if !ok {
		c = newClient(addr, caller, cs.counts)
		cs.m[[2]string{addr, caller}] = c
	}
	return c
}

// close closes every client.
func (cs *clients) close() {
	for _, c := range cs.m {
		c.close()
	}
}

// close drops the client's idle connections.
func (c *client) close() { c.http.CloseIdleConnections() }

// do sends a request and reads the whole answer. A transport error (the
// daemon was killed, say) is returned as is.
func (c *client) do(ctx context.Context, method, path string, body []byte) (answer, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{code: resp.StatusCode, body: b, retryAfter: resp.Header.Get("Retry-After")}
	if c.counts != nil {
		c.counts.add(a)
	}
	return a, nil
}

// discard sends a GET and throws the body away unread, as a load generator
// that must not spend the machine's cores on decoding it does.
func (c *client) discard(ctx context.Context, path string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return answer{}, err
	}
	return answer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}, nil
}

// submit posts urls as one job.
func (c *client) submit(ctx context.Context, urls []string) (batchhttp.SubmitResponse, answer, error) {
	req := batchhttp.SubmitRequest{Targets: make([]batch.Target, len(urls))}
	for i, u := range urls {
		req.Targets[i] = batch.Target{URL: u}
	}
	body, _ := json.Marshal(req)
	a, err := c.do(ctx, http.MethodPost, "/v1/batch", body)
	var sr batchhttp.SubmitResponse
	if err == nil && a.code == http.StatusAccepted {
		err = json.Unmarshal(a.body, &sr)
	}
	return sr, a, err
}

// status reads a job's summary; query is appended as is ("?wait=1s").
// finish submits urls as c's job and waits, at most 30s, until it
// finishes; it returns the job's id and its last status.
func (c *client) finish(t *testing.T, ctx context.Context, urls []string) (string, batchhttp.StatusResponse) {
	t.Helper()
	sr, a, err := c.submit(ctx, urls)
	if err != nil || a.code != http.StatusAccepted {
		t.Fatalf("submit: %v %d %s", err, a.code, a.errorText())
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		st, _, err := c.status(ctx, sr.JobID, "?wait=5s")
		if err != nil {
			t.Fatal(err)
		}
		if st.Status.Finished() {
			return sr.JobID, st
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not finished within 30s: %+v", sr.JobID, st)
		}
	}
}

func (c *client) status(ctx context.Context, id, query string) (batchhttp.StatusResponse, answer, error) {
	a, err := c.do(ctx, http.MethodGet, "/v1/batch/"+id+query, nil)
	var st batchhttp.StatusResponse
	if err == nil && a.code == http.StatusOK {
		err = json.Unmarshal(a.body, &st)
	}
	return st, a, err
}

// result reads one target's result.
func (c *client) result(ctx context.Context, id string, idx int) (batchhttp.ResultResponse, answer, error) {
	a, err := c.do(ctx, http.MethodGet, fmt.Sprintf("/v1/batch/%s/%d", id, idx), nil)
	var rr batchhttp.ResultResponse
	if err == nil && a.code == http.StatusOK {
		err = json.Unmarshal(a.body, &rr)
	}
	return rr, a, err
}

// answerCounts tallies answers by kind, and keeps the first few that break
// the suite's rules: a 5xx but a planned 503, a 429 without Retry-After or
// of an unplanned kind, any body with storage text in it.
type answerCounts struct {
	mu       sync.Mutex
	byCode   map[int]int
	by429    map[string]int
	bad      []string
	allow503 bool // a test that fills the disk plans 503s
	// planned503, if set, says whether a 503 answered now is planned: a
	// fault test allows them only while its database is down (and a
	// moment after).
	planned503 func() bool
}

func newCounts() *answerCounts {
	return &answerCounts{byCode: map[int]int{}, by429: map[string]int{}}
}

// planned429 are the 429s the API plans: the two caps, the results
// slots (in all and per caller) and the per-caller cap on submits in
// flight, each with a Retry-After.
var planned429 = []string{"busy: a batch of yours is still running", "batch jobs busy", "too many result answers in flight",
	"too many result answers of yours in flight", "too many submits of yours at once",
	"busy: too many of your webhook events are pending"}

// storageWords are words of the storage layer no answer may carry.
var storageWords = []string{"sqlite", "SQLITE", "database is locked", "database or disk", "disk I/O", "busy_timeout", "constraint"}

func (c *answerCounts) add(a answer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byCode[a.code]++
	text := a.errorText()
	bad := ""
	switch {
	case a.code == http.StatusServiceUnavailable && c.allow503:
		switch {
		case a.retryAfter == "":
			bad = "503 without Retry-After"
		case c.planned503 != nil && !c.planned503():
			bad = "503 while the database was up: " + text
		}
	case a.code >= 500:
		bad = fmt.Sprintf("%d %s", a.code, text)
	case a.code == http.StatusTooManyRequests:
		c.by429[text]++
		if a.retryAfter == "" {
			bad = "429 without Retry-After: " + text
		} else if !plannedText(text) {
			bad = "unplanned 429: " + text
		}
	}
	for _, w := range storageWords {
		if bytes.Contains(a.body, []byte(w)) {
			bad = fmt.Sprintf("%d with storage text %q: %.200s", a.code, w, a.body)
		}
	}
	if bad != "" && len(c.bad) < 20 {
		c.bad = append(c.bad, bad)
	}
}

func plannedText(text string) bool {
	for _, p := range planned429 {
		if strings.HasPrefix(text, p) {
			return true
		}
	}
	return false
}

// check fails t with the answers that broke the rules.
func (c *answerCounts) check(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.bad {
		t.Error(b)
	}
}

// String summarises the counts.
func (c *answerCounts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("answers by status %v; 429s %v", c.byCode, c.by429)
}

// upstream serves the pages the daemon fetches: /page/<name> is a page
// whose text depends only on its name, served after delay, and each path's
// fetches are counted. Pages are a few hundred bytes, but "fbig…" pages
// are 256 KiB, and "fgate<n>-…" pages 512 KiB, served once gate n is open
// (see openGate).
type upstream struct {
	srv   *httptest.Server
	delay time.Duration
	mu    sync.Mutex
	hits  map[string]int
	gates map[string]chan struct{} // by the gate's name, "fgate<n>"
	// agents holds, for each gated page fetched, the User-Agent of its
	// first fetch: which daemon holds the job, when each has its own.
	agents map[string]string
}

func newUpstream(t *testing.T, delay time.Duration) *upstream {
	u := &upstream{delay: delay, hits: map[string]int{}, gates: map[string]chan struct{}{}, agents: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/page/", func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.hits[r.URL.Path]++
		if _, ok := u.agents[r.URL.Path]; !ok && strings.HasPrefix(r.URL.Path, "/page/fgate") {
			u.agents[r.URL.Path] = r.UserAgent()
		}
		u.mu.Unlock()
		var wait <-chan time.Time
		gate := u.gateFor(r.URL.Path)
		if gate == nil {
			wait = time.After(u.delay)
		}
		select {
		case <-wait:
		case <-gate:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		text := pageText(r.URL.Path)
		switch { // large pages: their writes need room, their answers memory
		case strings.HasPrefix(r.URL.Path, "/page/fgate"):
			text = strings.Repeat(text, (512<<10)/len(text))
		case strings.HasPrefix(r.URL.Path, "/page/fbig"):
			text = strings.Repeat(text, (256<<10)/len(text))
		}
		fmt.Fprint(w, text)
	})
	u.srv = httptest.NewServer(mux)
	t.Cleanup(u.srv.Close)
	return u
}

// gateFor returns the channel a page waits on besides its delay: its gate
// for an "fgate<n>-…" page, none for the others.
func (u *upstream) gateFor(path string) <-chan struct{} {
	name, ok := strings.CutPrefix(path, "/page/")
	if !ok || !strings.HasPrefix(name, "fgate") {
		return nil
	}
	name, _, _ = strings.Cut(name, "-")
	return u.gate(name)
}

// gate returns the gate of that name, making it if needed.
func (u *upstream) gate(name string) chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	g, ok := u.gates[name]
	if !ok {
		g = make(chan struct{})
		u.gates[name] = g
	}
	return g
}

// agent returns the User-Agent of the first fetch of the gated page name,
// and whether it was fetched.
func (u *upstream) agent(name string) (string, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	a, ok := u.agents["/page/"+name]
	return a, ok
}

// openGate lets the pages of gate n answer.
func (u *upstream) openGate(n int) { close(u.gate(fmt.Sprintf("fgate%d", n))) }

// pageText is the text of a page: a few hundred bytes that only its path
// decides.
func pageText(path string) string {
	sum := sha256.Sum256([]byte(path))
	return fmt.Sprintf("page %s\n%s\n", path, strings.Repeat(fmt.Sprintf("%x\n", sum), 6))
}

// addr is the upstream's host:port, for the daemon's allow list.
func (u *upstream) addr() string { return strings.TrimPrefix(u.srv.URL, "http://") }

// url returns the URL of the page name.
func (u *upstream) url(name string) string { return u.srv.URL + "/page/" + name }

// maxHits returns the most fetches of one fresh page (a name that starts
// with "f": each is in one job only) and its path.
func (u *upstream) maxHits() (int, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	most, path := 0, ""
	for p, n := range u.hits {
		if strings.HasPrefix(p, "/page/f") && n > most {
			most, path = n, p
		}
	}
	return most, path
}

// containsFold reports whether s contains sub, ignoring case.
func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

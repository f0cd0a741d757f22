package batchhttp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// limitsHandler is a handler over a started runner with the given limits.
func limitsHandler(t *testing.T, r Runner, opts HandlerConfig) *Handler {
	t.Helper()
	auth := CallerFunc(testAuth)
	opts.Authenticate = auth
	h, err := NewHandler(r, &opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// rawRequest writes head (request line and headers, without the blank line
// that ends them) and then body, on a new connection to srv, and returns
// the status line the server answers within timeout ("" if none).
func rawRequest(t *testing.T, srv *httptest.Server, head, body string, timeout time.Duration) string {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, head+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return ""
	}
	return strings.TrimSpace(line)
}

// A request without a key that announces a body and never sends it is
// answered 401 at once: the handler does not wait for a body it will not
// read.
func TestHandler_RefusalDoesNotWaitForBody(t *testing.T) {
	t.Parallel()
	r := batchtest.NewRunner(t, batch.Config{})
	srv := checkedServer(t, limitsHandler(t, r, HandlerConfig{}))
	for _, head := range []string{
		"POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Length: 10",
		"POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\nContent-Length: 10",
	} {
		if got := rawRequest(t, srv, head, "", 5*time.Second); got != "HTTP/1.1 401 Unauthorized" {
			t.Errorf("answer to a refused request with a stalled body: %q, want a 401 at once", got)
		}
	}
}

// A caller that sends its headers and then stalls its body is answered 408
// at the body deadline and its connection closed.
func TestHandler_StalledBodyTimesOut(t *testing.T) {
	t.Parallel()
	r := batchtest.NewRunner(t, batch.Config{})
	srv := checkedServer(t, limitsHandler(t, r, HandlerConfig{BodyTimeout: 200 * time.Millisecond}))
	head := "POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + keyAlice + "\r\nContent-Length: 100"
	if got := rawRequest(t, srv, head, `{"targets":`, 5*time.Second); got != "HTTP/1.1 408 Request Timeout" {
		t.Fatalf("answer to a stalled body: %q, want 408", got)
	}
}

// ?results=1 is bounded in bytes: a job whose results would make a larger
// answer is refused with a hint to read them one at a time (finding 2).
func TestHandler_ResultsAnswerCapped(t *testing.T) {
	t.Parallel()
	r := batchtest.NewRunner(t, batch.Config{Fetch: batchtest.StaticFetcher(strings.Repeat("x", 400))})
	h := limitsHandler(t, r, HandlerConfig{MaxResultsBytes: 1000})
	small, _, err := r.Submit(t.Context(), alice, batchtest.Targets("small", 2))
	if err != nil {
		t.Fatal(err)
	}
	batchtest.WaitFinished(t, r, alice, small.ID, 10*time.Second)
	big, _, err := r.Submit(t.Context(), alice, batchtest.Targets("big", 3))
	if err != nil {
		t.Fatal(err)
	}
	batchtest.WaitFinished(t, r, alice, big.ID, 10*time.Second)

	rec := serve(t, h, http.MethodGet, "/v1/batch/"+small.ID+"?results=1", keyAlice, "")
	var st StatusResponse
	decodeJSON(t, rec.Body.Bytes(), &st)
	if rec.Code != http.StatusOK || len(st.Targets) != 2 || st.Targets[1].Result == nil {
		t.Fatalf("results of a small job: %d %s", rec.Code, rec.Body)
	}
	info, err := r.Status(t.Context(), alice, big.ID, batch.StatusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec = serve(t, h, http.MethodGet, "/v1/batch/"+big.ID+"?results=1", keyAlice, "")
	wantError(t, rec, http.StatusUnprocessableEntity, fmt.Sprintf("results too large for one answer (%d bytes, max 1000)", info.Bytes))
	if !strings.Contains(rec.Body.String(), "GET /v1/batch/{id}/{idx}") {
		t.Errorf("the refusal does not point at the one-result route: %s", rec.Body)
	}
	if rec := serve(t, h, http.MethodGet, "/v1/batch/"+big.ID, keyAlice, ""); rec.Code != http.StatusOK {
		t.Errorf("the summary of the big job: %d", rec.Code)
	}
}

// slowResults is a runner whose Result waits until released.
type slowResults struct {
	*batch.Runner
	entered chan struct{}
	release chan struct{}
}

func (s *slowResults) Result(ctx context.Context, c batch.Caller, id string, idx int) (batch.TargetResult, error) {
	s.entered <- struct{}{}
	<-s.release
	return s.Runner.Result(ctx, c, id, idx)
}

// ?results=1 answers are bounded in number: beyond MaxResultsInFlight a
// reader waits a moment for a turn, then gets 429 with Retry-After.
func TestHandler_ResultsAnswersInFlight(t *testing.T) {
	t.Parallel()
	r := batchtest.NewRunner(t, batch.Config{})
	job, _, err := r.Submit(t.Context(), alice, batchtest.Targets("inflight", 1))
	if err != nil {
		t.Fatal(err)
	}
	batchtest.WaitFinished(t, r, alice, job.ID, 10*time.Second)
	slow := &slowResults{Runner: r, entered: make(chan struct{}, 4), release: make(chan struct{})}
	// One caller's cap above the service's, so that the second answer
	// meets the service's cap.
	h := limitsHandler(t, slow, HandlerConfig{MaxResultsInFlight: 1, MaxResultsPerCaller: 2})
	target := "/v1/batch/" + job.ID + "?results=1"
	var wg sync.WaitGroup
	wg.Go(func() {
		if rec := serve(t, h, http.MethodGet, target, keyAlice, ""); rec.Code != http.StatusOK {
			t.Errorf("the answer in flight: %d", rec.Code)
		}
	})
	<-slow.entered // the first answer holds the only turn
	rec := serve(t, h, http.MethodGet, target, keyAlice, "")
	wantError(t, rec, http.StatusTooManyRequests, "too many result answers in flight")
	if got := rec.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	close(slow.release)
	wg.Wait()
	if rec := serve(t, h, http.MethodGet, target, keyAlice, ""); rec.Code != http.StatusOK {
		t.Errorf("after the turn was given back: %d", rec.Code)
	}
}

// Each target has one path: leading zeros and signs are not an index
// (finding 6).
func TestHandler_ResultIndexIsCanonical(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	sub := b.submit(t, keyAlice, batchtest.Targets("idx", 2), http.StatusAccepted)
	batchtest.WaitFinished(t, b.runner, alice, sub.JobID, 10*time.Second)
	for idx, want := range map[string]int{"0": 200, "1": 200, "00": 404, "01": 404, "+0": 404, "-0": 404, "2": 404} {
		if rec := b.do(t, http.MethodGet, "/v1/batch/"+sub.JobID+"/"+idx, keyAlice, ""); rec.Code != want {
			t.Errorf("GET …/%s: %d, want %d", idx, rec.Code, want)
		}
	}
}

// A list limit says what it accepts: any positive count, of which at most
// MaxListLimit are listed.
func TestHandler_ListLimitMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	wantError(t, b.do(t, http.MethodGet, "/v1/batch?limit=0", keyAlice, ""), http.StatusBadRequest,
		fmt.Sprintf("invalid request: limit must be a positive integer (at most %d jobs are listed)", MaxListLimit))
	if rec := b.do(t, http.MethodGet, "/v1/batch?limit=1000000", keyAlice, ""); rec.Code != http.StatusOK {
		t.Errorf("limit=1000000: %d, want 200 (capped)", rec.Code)
	}
}

// A refusal whose body will not be read closes its connection at once: a
// client that announced a body and sent one byte of it reads its 401 and
// then the end of the connection, not a socket held until the server's
// read timeout. The same holds for a route wrapped
// with Instrument.
func TestHandler_RefusalClosesConnection(t *testing.T) {
	t.Parallel()
	r := batchtest.NewRunner(t, batch.Config{})
	mux := http.NewServeMux()
	limitsHandler(t, r, HandlerConfig{}).Mount(mux)
	mux.Handle("/private", Instrument("/private", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		WriteError(w, http.StatusForbidden, CodeForbidden, "forbidden", "")
	}), nil, nil))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ReadTimeout = 30 * time.Second // as Serve's default
	srv.Start()
	t.Cleanup(srv.Close)
	f := func(head, wantStatus string) {
		t.Helper()
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, head+"\r\nContent-Length: 10\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: no answer: %v", head, err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatalf("%s: reading the answer: %v", head, err)
		}
		resp.Body.Close()
		if resp.Status != wantStatus || !resp.Close {
			t.Errorf("%s: %s, Connection: close %v; want %s, close", head, resp.Status, resp.Close, wantStatus)
		}
		// The answer was read to its end; what follows must be EOF, not
		// the read deadline.
		start := time.Now()
		n, err := conn.Read(make([]byte, 1))
		if n != 0 || err != io.EOF {
			t.Errorf("%s: after the answer, read %d bytes, %v (after %s); want EOF within 2s", head, n, err, time.Since(start).Round(time.Millisecond))
		}
	}
	f("POST /v1/batch HTTP/1.1\r\nHost: x", "401 Unauthorized")
	f("POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong", "401 Unauthorized")
	f("POST /private HTTP/1.1\r\nHost: x", "403 Forbidden")
}

// Any answer whose request body was not read to its end closes its
// connection, whatever its status: a GET that announces a
// 10-byte body and sends none gets its 200 at once with Connection:
// close, and then the end of the connection, not a wait for the body
// until the read timeout (30s), whether the handler writes its header,
// only writes, flushes or writes nothing. A body read to its end keeps
// the connection.
func TestHandler_UnreadBodyClosesConnection(t *testing.T) {
	t.Parallel()
	r := batchtest.NewRunner(t, batch.Config{})
	mux := http.NewServeMux()
	limitsHandler(t, r, HandlerConfig{}).Mount(mux)
	mux.Handle("/instrumented", Instrument("/instrumented", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}), nil, nil))
	mux.Handle("/wrapped/", CloseRefused(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/wrapped/write":
			io.WriteString(w, "ok\n")
		case "/wrapped/flush":
			http.NewResponseController(w).Flush()
		case "/wrapped/read":
			io.Copy(io.Discard, r.Body)
		}
	})))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ReadTimeout = 30 * time.Second // as Serve's default
	srv.Start()
	t.Cleanup(srv.Close)
	f := func(head, body string, wantClose bool) {
		t.Helper()
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, head+"\r\nContent-Length: 10\r\n\r\n"+body); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: no answer within 2s: %v", head, err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatalf("%s: reading the answer: %v", head, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close != wantClose {
			t.Errorf("%s: %s, Connection: close %v; want 200, close %v", head, resp.Status, resp.Close, wantClose)
		}
		if !wantClose {
			return
		}
		start := time.Now()
		if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Errorf("%s: after the answer, read %d bytes, %v (after %s); want EOF within 2s", head, n, err, time.Since(start).Round(time.Millisecond))
		}
	}
	f("GET /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+keyAlice, "", true)
	f("GET /instrumented HTTP/1.1\r\nHost: x", "", true)
	f("GET /wrapped/write HTTP/1.1\r\nHost: x", "", true)
	f("GET /wrapped/flush HTTP/1.1\r\nHost: x", "", true)
	f("GET /wrapped/nothing HTTP/1.1\r\nHost: x", "", true)
	f("POST /wrapped/read HTTP/1.1\r\nHost: x", "0123456789", false)
}

// smallBufListener gives each accepted connection a small send buffer, so
// that an answer its client does not read blocks the handler's writes at
// once.
type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(16 << 10)
	}
	return c, err
}

// Four slow readers of one caller's ?results=1 (which never read the
// answer, so that each holds its turn until the write timeout) do not stop
// another caller's ?results=1: a caller has at most MaxResultsPerCaller of
// the MaxResultsInFlight turns (bob got 429 results_busy for
// as long as alice's readers held all four).
func TestHandler_ResultsSlotsPerCaller(t *testing.T) {
	t.Parallel()
	r := batchtest.NewRunner(t, batch.Config{Fetch: batchtest.StaticFetcher(strings.Repeat("x", 256<<10))})
	var mu sync.Mutex
	answered := 0 // ?results=1 requests answered to the end
	h := limitsHandler(t, r, HandlerConfig{Observe: func(route string, _ int, _ time.Duration) {
		if route == RouteJob {
			mu.Lock()
			answered++
			mu.Unlock()
		}
	}})
	big, _, err := r.Submit(t.Context(), alice, batchtest.Targets("big", 8)) // 2 MiB of results
	if err != nil {
		t.Fatal(err)
	}
	bob := batch.Caller{Name: "bob", Class: "agent"}
	small, _, err := r.Submit(t.Context(), bob, batchtest.Targets("small", 1))
	if err != nil {
		t.Fatal(err)
	}
	batchtest.WaitFinished(t, r, alice, big.ID, 10*time.Second)
	batchtest.WaitFinished(t, r, bob, small.ID, 10*time.Second)
	srv := httptest.NewUnstartedServer(checked(t, h))
	srv.Listener = smallBufListener{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)

	for range 4 {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() }) // before srv.Close: the blocked writes fail
		_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
		req := "GET /v1/batch/" + big.ID + "?results=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + keyAlice + "\r\n\r\n"
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
	}
	// Each of alice's readers holds a turn, blocked in its writes, or
	// has been answered (refused).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := answered
		mu.Unlock()
		if len(h.resultsSlots)+n == 4 && len(h.resultsSlots) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's readers: %d hold a turn, %d answered; want 4 in all, at least 2 holding", len(h.resultsSlots), n)
		}
	}
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/batch/"+small.ID+"?results=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+keyBob)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("bob's ?results=1 while alice's slow readers hold theirs: %d %s, want 200", resp.StatusCode, body)
	}
	if held := len(h.resultsSlots); held < 2 {
		t.Fatalf("alice's readers hold %d turns after bob's answer; want them still blocked", held)
	}
}

package reliability

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// hostileUpstream serves the pages an upstream can attack a fetcher with.
// Each handler ends when its request does, or when the server closes.
func hostileUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	// The gzip bomb: 256 members of 1 MiB of zeros each (a reader reads
	// the members as one stream), 256 MiB unpacked from a few KiB.
	var member bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	zw.Write(make([]byte, 1<<20))
	zw.Close()
	bomb := bytes.Repeat(member.Bytes(), 256)
	closed := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/huge", func(w http.ResponseWriter, r *http.Request) { // 50 MB
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", fmt.Sprint(50<<20))
		line := bytes.Repeat([]byte("all work and no play\n"), 3000)
		for sent := 0; sent < 50<<20; sent += len(line) {
			if _, err := w.Write(line[:min(len(line), 50<<20-sent)]); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/drip", func(w http.ResponseWriter, r *http.Request) { // a byte every 100ms, forever
		w.Header().Set("Content-Type", "text/plain")
		for {
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-closed:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	mux.HandleFunc("/to-loopback", func(w http.ResponseWriter, r *http.Request) {
		// Loopback, but not the allowed address: the guard refuses it.
		http.Redirect(w, r, "http://127.0.0.1/admin", http.StatusFound)
	})
	mux.HandleFunc("/gzip-bomb", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Encoding", "gzip")
		w.Write(bomb)
	})
	mux.HandleFunc("/no-headers", func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack() // says nothing, holds the connection
		if err != nil {
			return
		}
		defer conn.Close()
		select {
		case <-closed:
		case <-time.After(time.Minute):
		}
	})
	srv := httptest.NewServer(mux)
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() { close(closed) })
		srv.Close()
	})
	return srv
}

// Hostile upstream pages (50 MB, a drip, a redirect loop, a redirect to
// loopback, a gzip bomb, a server that never sends headers) each end as a
// failed target with a clear error within the target deadline, the job
// finishes, and the daemon's memory stays bounded.
func TestHostileUpstream(t *testing.T) {
	t.Parallel()
	hostile := hostileUpstream(t)
	host := strings.TrimPrefix(hostile.URL, "http://")
	cfg := childConfig{
		DB: t.TempDir() + "/hostile.db", Allow: []string{host}, Callers: []string{"hu"},
		Batch: batch.Config{TargetTimeout: batch.Duration(3 * time.Second), Workers: 2, JobsPerCaller: 4},
	}
	d := startDaemon(t, cfg, nil)
	c := newClient(d.addr, "hu", newCounts())
	defer c.close()
	rss0, _, err := d.memory()
	if err != nil {
		t.Fatal(err)
	}
	pages := []struct{ path, wantErr string }{
		{"/huge", "too long: "},
		{"/drip", "timeout: "},
		{"/loop", "fetch: too many redirects"},
		{"/to-loopback", "blocked: loopback address"},
		{"/gzip-bomb", ""}, // too long or not text: any clear failure
		{"/no-headers", "timeout: "},
	}
	urls := make([]string, len(pages))
	for i, p := range pages {
		urls[i] = hostile.URL + p.path
	}
	start := time.Now()
	sr, a, err := c.submit(t.Context(), urls)
	if err != nil || a.code != http.StatusAccepted {
		t.Fatalf("submit: %v %d %s", err, a.code, a.errorText())
	}
	st, _, err := c.status(t.Context(), sr.JobID, "?wait=60s")
	for err == nil && !st.Status.Finished() && time.Since(start) < 2*time.Minute {
		st, _, err = c.status(t.Context(), sr.JobID, "?wait=60s")
	}
	if err != nil || !st.Status.Finished() {
		t.Fatalf("the job did not finish: %v %s", err, st.Status)
	}
	took := time.Since(start)
	for i, p := range pages {
		tg := st.Targets[i]
		if tg.Status != batch.TargetFailed || !strings.HasPrefix(tg.Error, p.wantErr) || tg.Error == "" {
			t.Errorf("%s: %s %q, want failed with %q…", p.path, tg.Status, tg.Error, p.wantErr)
		}
		t.Logf("%-12s → %s", p.path, tg.Error)
	}
	_, peak, err := d.memory()
	if err != nil {
		t.Fatal(err)
	}
	// One body is read at a time per worker and capped at 2 MiB; the
	// bound leaves room for the race detector's shadow memory.
	if grew := peak - rss0; grew > 96<<20 {
		t.Errorf("the daemon's peak RSS grew by %d MiB over %d MiB at start", grew>>20, rss0>>20)
	}
	t.Logf("six hostile pages in %s (2 workers, target deadline %s); RSS %d MiB at start, peak %d MiB",
		took.Round(10*time.Millisecond), cfg.Batch.TargetTimeout, rss0>>20, peak>>20)
	if err := d.stop(); err != nil {
		t.Errorf("graceful stop: %v", err)
	}
}

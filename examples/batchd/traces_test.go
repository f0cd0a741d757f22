package main

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchhttp"
)

// otlpReceiver is an OTLP/HTTP endpoint that keeps every body posted to
// /v1/traces.
type otlpReceiver struct {
	mu     sync.Mutex
	bodies [][]byte
	got    chan struct{} // a token per body
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	o.bodies = append(o.bodies, b)
	o.mu.Unlock()
	select {
	case o.got <- struct{}{}:
	default:
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK) // an empty ExportTraceServiceResponse
}

func (o *otlpReceiver) all() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return bytes.Join(o.bodies, nil)
}

// TestBatchd_Traces: with the standard OTLP variables set, batchd posts a
// job's spans to the collector's /v1/traces within 10s of the job
// finishing (the batch processor's default delay is 5s), in the trace of
// the submit's traceparent, and no byte it posts carries a target URL or
// the webhook URL.
func TestBatchd_Traces(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	const marker = "zz-url-marker-9c41"
	recv := &otlpReceiver{got: make(chan struct{}, 1)}
	collector := httptest.NewServer(recv)
	t.Cleanup(collector.Close)
	bin := buildDaemon(t)
	pages := startPages(t)
	db := filepath.Join(t.TempDir(), "batchd.db")
	d := startDaemonEnv(t, bin, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_SERVICE_NAME=batchd-trace-test",
		"OTEL_TRACES_SAMPLER=parentbased_always_on",
	}, "-db", db, "-key", "alice=alice-secret-0123", "-allow", pages.addr, "-webhook-backoff", "50ms")

	base := "http://" + pages.addr
	body, err := json.Marshal(batchhttp.SubmitRequest{
		Targets: []batch.Target{{URL: base + "/page/1?m=" + marker}, {URL: base + "/page/" + marker}},
		Webhook: &batchhttp.Webhook{URL: base + "/hook/" + marker}, // 404: retried, attempt after attempt
	})
	if err != nil {
		t.Fatal(err)
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, err := http.NewRequestWithContext(t.Context(), "POST", d.server+"/v1/batch", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer alice-secret-0123")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sub batchhttp.SubmitResponse
	err = json.NewDecoder(resp.Body).Decode(&sub)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		t.Fatalf("submit: %d %+v %v", resp.StatusCode, sub, err)
	}
	done := decodeJSON[batchhttp.StatusResponse](t, cli(t, d.server, "alice-secret-0123", "", "status", sub.JobID, "--wait"))
	if !done.Status.Finished() {
		t.Fatalf("job = %+v", done)
	}
	finished := time.Now()

	// The job's spans: its process span and both fetches, with its id,
	// within 10s of its end.
	deadline := time.After(10 * time.Second)
	for !bytes.Contains(recv.all(), []byte("process batch")) || bytes.Count(recv.all(), []byte("batch target")) < 2 {
		select {
		case <-recv.got:
		case <-deadline:
			t.Fatalf("no process span and two fetch spans posted to /v1/traces within 10s of the job's end (%d bytes posted)\n%s",
				len(recv.all()), d.stderr)
		}
	}
	t.Logf("spans posted %s after the job finished", time.Since(finished).Round(time.Millisecond))
	d.stop(t) // the shutdown exports what is still buffered: the webhook's attempts
	got := recv.all()
	for _, want := range []string{"submit batch", "claim batch", "batch target", "batch webhook", sub.JobID, "batchd-trace-test",
		string(hexBytes(t, traceID))} {
		if !bytes.Contains(got, []byte(want)) {
			t.Errorf("the posted spans do not contain %q", want)
		}
	}
	if bytes.Contains(got, []byte(marker)) || bytes.Contains(got, []byte(pages.addr)) {
		t.Errorf("a posted span carries a target or webhook URL")
	}
}

// hexBytes decodes a hex trace id: OTLP protobuf carries the raw bytes.
func hexBytes(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

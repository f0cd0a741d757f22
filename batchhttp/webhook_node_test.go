package batchhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch/batchtest"
)

// The signature verifies with an implementation that is not ours: the
// standardwebhooks npm package, the Standard Webhooks reference library,
// run with node on deliveries the sender made (three attempts of one event:
// the receiver fails twice). A tampered body and another deployment's
// secret are refused, so the check is not vacuous. Under the transition
// setting (WebhookLegacySignature) a delivery verifies with the caller's
// secret and with the master secret alike. A job's per-target events
// verify as its completion does. It needs node and npm
// (and the npm registry, for the pinned package-lock in
// testdata/standardwebhooks); without them it skips, but fails under
// CI=true.
func TestWebhookSender_StandardWebhooksJS(t *testing.T) {
	t.Parallel()
	dir := installStandardWebhooks(t)

	rc := newReceiver(t, http.StatusServiceUnavailable, http.StatusBadGateway)
	b := hookBundle(t, nil, nil)
	rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitHookBody(t, batchtest.Targets("js", 2), rc.srv.URL+"/in"))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
	got := rc.wait(t, 3)

	ds := jsDeliveries(got)
	tampered := ds[0]
	tampered.Body = string(bytes.Replace([]byte(tampered.Body), []byte(`"done"`), []byte(`"failed"`), 1))
	ds = append(ds, tampered)
	verify := func(secret string, ds []jsDelivery) []string {
		t.Helper()
		return jsVerify(t, dir, secret, ds)
	}
	results := verify(aliceSecret, ds) // the submitting caller's

	for i, r := range results[:3] {
		if r != "ok" {
			t.Errorf("attempt %d: standardwebhooks says %s", i+1, r)
		}
	}
	if results[3] == "ok" {
		t.Error("standardwebhooks accepts a tampered body")
	}
	other, err := NewWebhookSecret()
	if err != nil {
		t.Fatal(err)
	}
	if r := verify(other, ds[:1]); r[0] == "ok" {
		t.Error("standardwebhooks accepts the delivery under another secret")
	}
	if r := verify(bobSecret, ds[:1]); r[0] == "ok" {
		t.Error("standardwebhooks accepts alice's delivery under bob's secret")
	}
	if r := verify(testSecret, ds[:1]); r[0] == "ok" {
		t.Error("standardwebhooks accepts a delivery under the master secret")
	}

	// Per-target events, then the completion.
	rcTargets := newReceiver(t)
	rec = b.do(t, http.MethodPost, "/v1/batch", keyAlice, submitEventsBody(t, batchtest.Targets("js-targets", 10), rcTargets.srv.URL, bothEvents...))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("submit with per-target events: %d %s", rec.Code, rec.Body)
	}
	events := jsDeliveries(rcTargets.waitCompletion(t))
	if len(events) < 2 {
		t.Fatalf("%d deliveries of a job with per-target events, want its targets' and its completion", len(events))
	}
	for i, r := range verify(aliceSecret, events) {
		if r != "ok" {
			t.Errorf("per-target job's delivery %d: standardwebhooks says %s", i+1, r)
		}
	}

	// The transition setting: two signatures, either secret verifies.
	rcLegacy := newReceiver(t)
	lb := legacyBundle(t)
	if rec := lb.do(t, http.MethodPost, "/v1/batch", keyAlice, submitHookBody(t, batchtest.Targets("js-legacy", 1), rcLegacy.srv.URL)); rec.Code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
	legacy := jsDeliveries(rcLegacy.wait(t, 1))
	for _, secret := range []string{aliceSecret, testSecret} {
		if r := verify(secret, legacy); r[0] != "ok" {
			t.Errorf("under the transition setting, standardwebhooks says %s", r[0])
		}
	}
	if r := verify(bobSecret, legacy); r[0] == "ok" {
		t.Error("under the transition setting, standardwebhooks accepts alice's delivery under bob's secret")
	}
}

// jsDelivery is a delivery as verify.js reads it.
type jsDelivery struct {
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// jsDeliveries are the deliveries got, as verify.js reads them.
func jsDeliveries(got []delivery) []jsDelivery {
	var ds []jsDelivery
	for _, d := range got {
		h := map[string]string{}
		for _, k := range []string{HeaderWebhookID, HeaderWebhookTimestamp, HeaderWebhookSignature} {
			h[k] = d.header.Get(k)
		}
		ds = append(ds, jsDelivery{h, string(d.body)})
	}
	return ds
}

// jsVerify runs verify.js in dir (see installStandardWebhooks) on ds under
// secret: "ok" or "refused: <reason>" for each.
func jsVerify(t *testing.T, dir, secret string, ds []jsDelivery) []string {
	t.Helper()
	in, err := json.Marshal(map[string]any{"secret": secret, "deliveries": ds})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "verify.js")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node verify.js: %v\n%s", err, out)
	}
	var results []string
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("node said %s: %v", out, err)
	}
	return results
}

// installStandardWebhooks copies testdata/standardwebhooks to a temporary
// directory and installs its pinned packages there (npm ci), returning the
// directory. It skips the test when node or npm is missing or the install
// fails, unless CI=true.
func installStandardWebhooks(t *testing.T) string {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format+" (the check runs, and must pass, under CI=true)", args...)
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable("%s is not installed: cannot verify the signature with the standardwebhooks npm package", tool)
		}
	}
	dir := t.TempDir()
	for _, name := range []string{"package.json", "package-lock.json", "verify.js"} {
		b, err := os.ReadFile(filepath.Join("testdata", "standardwebhooks", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		unavailable("npm ci of standardwebhooks failed (no registry?): %v\n%s", err, out)
	}
	return dir
}

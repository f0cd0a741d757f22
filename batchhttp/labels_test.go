package batchhttp

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
)

// labelledBody is a submit of targets with custom ids "row-<idx>" (none
// for target 1) and meta, and a webhook if hook is not "".
func labelledBody(t *testing.T, targets []batch.Target, meta map[string]string, hook string) string {
	t.Helper()
	req := SubmitRequest{Metadata: meta}
	for i, tg := range targets {
		if i != 1 {
			tg.CustomID = fmt.Sprintf("row-%d", i)
		}
		req.Targets = append(req.Targets, tg)
	}
	if hook != "" {
		req.Webhook = &Webhook{URL: hook}
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wantCustomID checks a target's custom_id: "row-<idx>", none for idx 1.
func wantCustomID(t *testing.T, what string, idx int, got string) {
	t.Helper()
	want := fmt.Sprintf("row-%d", idx)
	if idx == 1 {
		want = ""
	}
	if got != want {
		t.Errorf("%s: target %d custom_id %q, want %q", what, idx, got, want)
	}
}

// TestHandler_Labels: a job's metadata and its targets' custom ids come
// back in every read and in the completion webhook.
func TestHandler_Labels(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	b := hookBundle(t, nil, nil)
	srv := checkedServer(t, b.handler)
	meta := map[string]string{"pipeline": "nightly", "run": "2026-01-02"}
	targets := batchtest.Targets("lab", 3)
	rec := b.do(t, http.MethodPost, "/v1/batch", keyAlice, labelledBody(t, targets, meta, rc.srv.URL+"/hooks"))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
	var sub SubmitResponse
	decodeJSON(t, rec.Body.Bytes(), &sub)
	id := sub.JobID
	batchtest.WaitFinished(t, b.runner, alice, id, 10*time.Second)

	for _, q := range []string{"", "?results=1", "?wait=1s"} {
		var st StatusResponse
		decodeJSON(t, b.do(t, http.MethodGet, "/v1/batch/"+id+q, keyAlice, "").Body.Bytes(), &st)
		if !maps.Equal(st.Metadata, meta) || len(st.Targets) != 3 {
			t.Errorf("status%s: metadata %v, %d targets", q, st.Metadata, len(st.Targets))
		}
		for _, ts := range st.Targets {
			wantCustomID(t, "status"+q, ts.Idx, ts.CustomID)
		}
	}
	for idx := range 3 {
		var rr ResultResponse
		decodeJSON(t, b.do(t, http.MethodGet, fmt.Sprintf("/v1/batch/%s/%d", id, idx), keyAlice, "").Body.Bytes(), &rr)
		wantCustomID(t, "result", idx, rr.CustomID)
	}
	_, lines := streamLines(t, srv, keyAlice, "/v1/batch/"+id+"/results")
	for _, l := range lines {
		wantCustomID(t, "stream", l.Idx, l.CustomID)
	}
	var list ListResponse
	decodeJSON(t, b.do(t, http.MethodGet, "/v1/batch", keyAlice, "").Body.Bytes(), &list)
	if len(list.Jobs) != 1 || !maps.Equal(list.Jobs[0].Metadata, meta) {
		t.Errorf("list: %+v", list.Jobs)
	}

	d := rc.wait(t, 1)[0]
	if err := VerifyWebhook(aliceSecret, d.header, d.body, time.Now()); err != nil {
		t.Errorf("delivery does not verify: %v", err)
	}
	checkWebhookDelivery(t, d)
	var p WebhookPayload
	decodeJSON(t, d.body, &p)
	if p.Data.JobID != id || !maps.Equal(p.Data.Metadata, meta) {
		t.Errorf("webhook data %+v, want job %s with metadata %v", p.Data, id, meta)
	}
	if strings.Contains(string(d.body), "row-0") {
		t.Errorf("the completion event carries a custom id: %s", d.body)
	}
	for _, l := range b.logs.lines(t) {
		if s := fmt.Sprint(l); strings.Contains(s, "nightly") || strings.Contains(s, "row-0") {
			t.Errorf("a log line carries caller data: %v", l)
		}
	}
}

func TestHandler_LabelsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	f := func(body, want string) {
		t.Helper()
		wantError(t, b.do(t, http.MethodPost, "/v1/batch", keyAlice, body), http.StatusBadRequest, want)
	}
	dup := `{"targets":[{"url":"https://a.test/1","custom_id":"x"},{"url":"https://a.test/2"},{"url":"https://a.test/3","custom_id":"x"}]}`
	f(dup, "invalid batch: target 2: duplicate custom_id: target 0 has the same (custom ids are unique within a job)")
	f(`{"targets":[{"url":"https://a.test/1","custom_id":"`+strings.Repeat("c", 65)+`"}]}`,
		"invalid batch: target 0: custom_id of 65 bytes (max 64)")
	f(`{"targets":[{"url":"https://a.test/1","custom_id":7}]}`, `invalid batch: target 0: "custom_id" must be a string`)
	pairs := make([]string, 17)
	for i := range pairs {
		pairs[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	f(`{"targets":[{"url":"https://a.test/1"}],"metadata":{`+strings.Join(pairs, ",")+`}}`, "invalid batch: metadata: more than 16 pairs")
	f(`{"targets":[{"url":"https://a.test/1"}],"metadata":{"`+strings.Repeat("k", 65)+`":"v"}}`, "invalid batch: metadata: a key of 65 bytes (max 64)")
	f(`{"targets":[{"url":"https://a.test/1"}],"metadata":{"k":"`+strings.Repeat("v", 513)+`"}}`, "invalid batch: metadata: a value of 513 bytes (max 512)")
	f(`{"targets":[{"url":"https://a.test/1"}],"metadata":{"":"v"}}`, "invalid batch: metadata: empty key")
	f(`{"targets":[{"url":"https://a.test/1"}],"metadata":{"k":1}}`, "invalid batch: metadata: values must be strings")
	f(`{"targets":[{"url":"https://a.test/1"}],"metadata":["k"]}`, `invalid batch: "metadata" must be an object of strings`)
	if jobs, _ := b.runner.List(t.Context(), alice, 10); len(jobs) != 0 {
		t.Errorf("a refused submit made %d jobs", len(jobs))
	}
}

// TestHandler_LabelSearch: GET /v1/batch?metadata.KEY=VALUE lists the
// caller's own jobs with those labels, never another caller's.
func TestHandler_LabelSearch(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	submit := func(key string, caller batch.Caller, name string, meta map[string]string) string {
		t.Helper()
		body, _ := json.Marshal(SubmitRequest{Targets: batchtest.Targets(name, 1), Metadata: meta})
		rec := b.do(t, http.MethodPost, "/v1/batch", key, string(body))
		if rec.Code != http.StatusAccepted {
			t.Fatalf("submit: %d %s", rec.Code, rec.Body)
		}
		var sub SubmitResponse
		decodeJSON(t, rec.Body.Bytes(), &sub)
		batchtest.WaitFinished(t, b.runner, caller, sub.JobID, 10*time.Second)
		return sub.JobID
	}
	bob := testKeys[keyBob]
	a1 := submit(keyAlice, alice, "a1", map[string]string{"run": "r1", "step": "fetch"})
	submit(keyAlice, alice, "a2", map[string]string{"run": "r2"})
	a3 := submit(keyAlice, alice, "a3", map[string]string{"run": "r1"})
	submit(keyBob, bob, "b1", map[string]string{"run": "r1", "step": "fetch"})
	list := func(key, q string) []string {
		t.Helper()
		rec := b.do(t, http.MethodGet, "/v1/batch?"+q, key, "")
		if rec.Code != http.StatusOK {
			t.Fatalf("list ?%s: %d %s", q, rec.Code, rec.Body)
		}
		var l ListResponse
		decodeJSON(t, rec.Body.Bytes(), &l)
		var ids []string
		for _, j := range l.Jobs {
			ids = append(ids, j.JobID)
		}
		return ids
	}
	if got, want := list(keyAlice, "metadata.run=r1"), []string{a3, a1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("metadata.run=r1: %v, want %v", got, want)
	}
	if got, want := list(keyAlice, "metadata.run=r1&metadata.step=fetch"), []string{a1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("run=r1 and step=fetch: %v, want %v", got, want)
	}
	if got := list(keyAlice, "metadata.run=r1&limit=1"); fmt.Sprint(got) != fmt.Sprint([]string{a3}) {
		t.Errorf("limit=1: %v, want the newest match", got)
	}
	if got := list(keyRita, "metadata.run=r1"); len(got) != 0 {
		t.Errorf("another caller's search lists %v", got)
	}
	if got := list(keyBob, "metadata.run=r1"); len(got) != 1 {
		t.Errorf("bob's search lists %v, want his one job", got)
	}
	wantError(t, b.do(t, http.MethodGet, "/v1/batch?metadata.run=a&metadata.run=b", keyAlice, ""), http.StatusBadRequest,
		"invalid request: a metadata key given more than once")
	wantError(t, b.do(t, http.MethodGet, "/v1/batch?metadata.=a", keyAlice, ""), http.StatusBadRequest,
		"invalid request: metadata.KEY needs a key")
}

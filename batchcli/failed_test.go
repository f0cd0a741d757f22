package batchcli_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchtest"
	"github.com/siftfetch/batchkit/batchcli"
	"github.com/siftfetch/batchkit/batchhttp"
)

func TestCLI_Failed(t *testing.T) {
	t.Parallel()
	fetch := batchtest.ScriptFetcher(map[string]batchtest.Step{
		"https://a.test/2": {Err: batch.NewFetchError(batch.OutcomeUpstream4xx, "", errors.New("upstream: status 404"))},
	})
	r, url := serve(t, fetch)
	client, err := batchhttp.NewClient(url, "alice-key", nil)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cli := batchcli.New(batchcli.Config{Client: client, Stdin: strings.NewReader("https://a.test/1\nhttps://a.test/2\nhttps://a.test/3\n"), Stdout: &out, Stderr: io.Discard})
	if err := cli.Run(t.Context(), []string{"submit", "-"}); err != nil {
		t.Fatal(err)
	}
	id := decode[batchhttp.SubmitResponse](t, []byte(out.String())).JobID
	batchtest.WaitFinished(t, r, batch.Caller{Name: "alice"}, id, 10*time.Second)

	out.Reset()
	if err := cli.Run(t.Context(), []string{"results", id, "--failed"}); err != nil {
		t.Fatalf("results --failed: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if ts := decode[batchhttp.TargetStatus](t, []byte(lines[0])); len(lines) != 1 || ts.Idx != 1 || ts.Outcome != batch.OutcomeUpstream4xx {
		t.Errorf("results --failed printed %q, want target 1 alone", out.String())
	}

	out.Reset()
	if err := cli.Run(t.Context(), []string{"status", id, "--failed"}); err != nil {
		t.Fatalf("status --failed: %v", err)
	}
	st := decode[batchhttp.StatusResponse](t, []byte(out.String()))
	if len(st.Targets) != 1 || st.Targets[0].Idx != 1 || fmt.Sprint(st.Outcomes) != "map[ok:2 upstream_4xx:1]" {
		t.Errorf("status --failed: targets %+v, outcomes %v", st.Targets, st.Outcomes)
	}
}

// TestCLI_ListByMetadata: list --metadata finds the caller's own jobs by
// label; a submit's input carries the metadata and custom ids.
func TestCLI_ListByMetadata(t *testing.T) {
	t.Parallel()
	r, url := serve(t, batchtest.StaticFetcher("ok"))
	run := func(key, input string, args ...string) string {
		t.Helper()
		client, err := batchhttp.NewClient(url, key, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		cli := batchcli.New(batchcli.Config{Client: client, Stdin: strings.NewReader(input), Stdout: &out, Stderr: io.Discard})
		if err := cli.Run(t.Context(), args); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out.String()
	}
	submit := func(key, caller, input string) string {
		t.Helper()
		id := decode[batchhttp.SubmitResponse](t, []byte(run(key, input, "submit", "-"))).JobID
		batchtest.WaitFinished(t, r, batch.Caller{Name: caller}, id, 10*time.Second)
		return id
	}
	a1 := submit("alice-key", "alice", `{"metadata":{"run":"r1","step":"a"},"targets":[{"url":"https://a.test/1","custom_id":"x"}]}`)
	submit("alice-key", "alice", `{"metadata":{"run":"r2"},"targets":[{"url":"https://a.test/2"}]}`)
	submit("bob-key", "bob", `{"metadata":{"run":"r1","step":"a"},"targets":[{"url":"https://a.test/3"}]}`)
	list := decode[batchhttp.ListResponse](t, []byte(run("alice-key", "", "list", "--metadata", "run=r1,step=a")))
	if len(list.Jobs) != 1 || list.Jobs[0].JobID != a1 || list.Jobs[0].Metadata["step"] != "a" {
		t.Errorf("list --metadata: %+v, want alice's job %s alone", list.Jobs, a1)
	}
	st := decode[batchhttp.StatusResponse](t, []byte(run("alice-key", "", "status", a1)))
	if st.Targets[0].CustomID != "x" {
		t.Errorf("status: custom_id %q, want x", st.Targets[0].CustomID)
	}
	if _, err := batchcli.Parse([]string{"list", "--metadata", "run"}); err == nil || !strings.Contains(err.Error(), "KEY=VALUE") {
		t.Errorf("list --metadata run: %v", err)
	}
}

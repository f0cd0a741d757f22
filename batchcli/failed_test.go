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

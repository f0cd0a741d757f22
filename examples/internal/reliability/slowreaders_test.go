package reliability

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/examples/internal/testbin"
)

// One caller's slow readers of ?results=1 cannot stop another caller's:
// against the built batchd, the attacker's job holds 24 pages of 256 KiB
// (a 6.4 MB answer, more than the kernel buffers hold), and four
// connections of the attacker ask for its ?results=1 and read nothing
// past the status line (200 for those given a turn, which they then hold
// until the write timeout, 90s; 429 results_busy for the rest). The
// victim's ?results=1 of its own job is then answered 200, read to its
// end within 5s, three times in a row; and once the slow readers leave,
// the attacker's own ?results=1 is answered 200 again.
func TestSlowResultReaders(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, time.Millisecond)
	bin := testbin.BuildPackage(t, "batchd", "../../batchd", raceEnabled)
	d := startBatchd(t, bin, "-allow", up.addr())
	defer d.stop(t)
	ctx := t.Context()
	counts := newCounts()
	attacker := newClient(d.addr, "attacker", counts)
	victim := newClient(d.addr, "victim", counts)
	defer attacker.close()
	defer victim.close()
	runJob := func(c *client, urls []string) string {
		t.Helper()
		id, st := c.finish(t, ctx, urls)
		if st.Status != batch.JobDone {
			t.Fatalf("job %s finished %s, want done (%d of %d targets)", id, st.Status, st.TargetsDone, len(urls))
		}
		return id
	}
	big := make([]string, 24)
	for i := range big {
		big[i] = up.url(fmt.Sprintf("fbig-%d", i))
	}
	bigJob := runJob(attacker, big)
	smallJob := runJob(victim, []string{up.url("f-victim-0"), up.url("f-victim-1")})

	// Each slow reader reads the status line of its answer, no more: 200
	// once it holds a turn (the rest of the answer then fills the kernel
	// buffers and blocks batchd's write), 429 when refused.
	request := "GET /v1/batch/" + bigJob + "?results=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + keyOf("attacker") + "\r\n\r\n"
	readers := make([]net.Conn, 4)
	for i := range readers {
		c, err := net.DialTimeout("tcp", d.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close() // before batchd stops: its blocked writes then end
		_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
		if _, err := io.WriteString(c, request); err != nil {
			t.Fatalf("slow reader %d: %v", i, err)
		}
		readers[i] = c
	}
	heads := map[string]int{}
	for i, c := range readers {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReaderSize(c, 16).ReadString('\n')
		if err != nil {
			t.Fatalf("slow reader %d: no status line within 10s: %v", i, err)
		}
		heads[strings.TrimSpace(line)]++
	}
	t.Logf("the attacker's four slow readers: %v", heads)
	if heads["HTTP/1.1 200 OK"] == 0 {
		t.Fatalf("no slow reader holds a turn (%v): the test measured nothing", heads)
	}
	for i := range 3 {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		start := time.Now()
		a, err := victim.do(rctx, http.MethodGet, "/v1/batch/"+smallJob+"?results=1", nil)
		cancel()
		if err != nil {
			t.Fatalf("the victim's ?results=1 %d while the attacker's slow readers hold theirs: %v", i, err)
		}
		if a.code != http.StatusOK {
			t.Fatalf("the victim's ?results=1 %d while the attacker's slow readers hold theirs: %d %s, want 200", i, a.code, a.errorText())
		}
		t.Logf("the victim's ?results=1 %d: 200, %d bytes in %s", i, len(a.body), time.Since(start).Round(time.Millisecond))
	}
	// Once the slow readers leave, their turns come back: the attacker's
	// own ?results=1 is answered again.
	for _, c := range readers {
		c.Close()
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		a, err := attacker.discard(ctx, "/v1/batch/"+bigJob+"?results=1")
		if err != nil {
			t.Fatal(err)
		}
		if a.code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the attacker's ?results=1 10s after its slow readers left: %d, want 200: their turns were not given back", a.code)
		}
	}
	counts.check(t)
	t.Log(counts)
}
